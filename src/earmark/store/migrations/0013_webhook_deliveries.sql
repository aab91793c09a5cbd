-- Kinde's deliveries (issue 30). Kinde names each delivery of an event to an endpoint in
-- its `webhook-id` header, the same on every attempt, and asks receivers to drop one they
-- have seen and answer 200: it sends any delivery not answered 200 again for 36 hours (a
-- 200 that was lost included). webhook_events keeps that id next to the event's: a
-- delivery whose id or event id is already held is answered 200 and changes nothing.
-- NULL for a delivery that came without the header (its event id alone tells it again).
-- Rows are still pruned once keep_until has passed, when the token would no longer verify.

ALTER TABLE webhook_events ADD COLUMN webhook_id text;

CREATE UNIQUE INDEX webhook_events_webhook_id ON webhook_events (webhook_id);
