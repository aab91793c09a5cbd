-- Meter reports the provider refused for good, and reports whose outcome is unknown.
--
-- parked_version is the outbox version the provider refused (Kinde's 400, with its code in
-- parked_code): sending it again would be refused again, so it is not; a newer total of
-- the same key is sent as usual.
--
-- unknown_until is set when a report timed out after it was sent: the provider may still
-- apply it until that request's deadline. A total sent before then may be overwritten by
-- that straggler, so the newest total is sent once more at unknown_until; a send that
-- starts after it clears it.
ALTER TABLE meter_sent
    ADD COLUMN parked_version bigint,
    ADD COLUMN parked_code text,
    ADD COLUMN unknown_until timestamptz;
