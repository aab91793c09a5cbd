-- Plan changes pushed by the billing provider (`earmark kinde-webhooks`, issue 21).
--
-- plan_marks holds, per account, when its plan or agreement last changed (as a verified
-- webhook said): every sidecar with a limits provider looks for marks newer than the last
-- it saw and makes that account's next admission read the plan again. One row per account
-- (a newer mark moves marked_at), and rows older than a day are pruned, so that the table
-- stays as small as the accounts whose plans change in a day. marked_at is the database's
-- clock, which the sidecars read too, so that no two hosts' clocks are compared.
--
-- webhook_events holds the ids of the events acted on, each until its token has expired
-- (keep_until), so that a replayed event is refused; one past keep_until is refused as
-- expired anyway, and so it is pruned.

CREATE TABLE plan_marks (
    account    text PRIMARY KEY,
    marked_at  timestamptz NOT NULL
);

CREATE INDEX plan_marks_marked_at ON plan_marks (marked_at, account);

CREATE TABLE webhook_events (
    event_id    text PRIMARY KEY,
    event_type  text NOT NULL,
    account     text NOT NULL,
    received_at timestamptz NOT NULL,
    keep_until  timestamptz NOT NULL
);

CREATE INDEX webhook_events_keep_until ON webhook_events (keep_until);
