-- The sweeper's index moves to a table of its own.
--
-- A partial index on reservations (expires_at) WHERE state = 1 made every Settle a
-- non-HOT update: changing `state` changes the index predicate, so each settle wrote new
-- entries into every index of reservations, and under a hot budget lookups slowed as dead
-- entries piled up until autovacuum came (measured with `make bench`: a hot budget fell
-- from about 4,100 to 2,500 calls/s over 20 s). With the deadline index on open_holds, an
-- update of reservations changes no indexed column and can stay on its page (HOT), given
-- room on the page: hence the fillfactor.
--
-- Invariant: open_holds holds exactly the reservations in state 1 (held), with their
-- expires_at.

CREATE TABLE open_holds (
    reservation_id  uuid PRIMARY KEY REFERENCES reservations (reservation_id),
    expires_at      timestamptz NOT NULL
);

INSERT INTO open_holds (reservation_id, expires_at)
SELECT reservation_id, expires_at FROM reservations WHERE state = 1;

CREATE INDEX open_holds_due ON open_holds (expires_at);

DROP INDEX reservations_due;

ALTER TABLE reservations SET (fillfactor = 70);
