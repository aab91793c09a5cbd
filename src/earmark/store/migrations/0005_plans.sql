-- Plans from the billing provider: billing-cycle budgets, the admission counter, and the
-- meter outbox.
--
-- A cycle budget belongs to (account, feature, cycle_start); its limit is the plan's, read
-- at limit_read_at, so that a restarted or second sidecar knows how stale it is.
--
-- accounts holds each account's admission counter: the article's first rule, a counter
-- and not a scan of recent holds.
--
-- meter_outbox holds, per (account, feature, cycle), the newest used total the provider's
-- meter must be told: the article's second rule, report state off the budget row. version
-- grows with each new total. Only the batches write it; what the reporters did (the
-- newest version sent, attempts, claims) is in meter_sent, which only reporters write, so
-- that a report never conflicts with a serializable batch.

ALTER TABLE budgets
    ADD COLUMN account text,
    ADD COLUMN feature text,
    ADD COLUMN cycle_start timestamptz,
    ADD COLUMN cycle_end timestamptz,
    ADD COLUMN limit_read_at timestamptz,
    ADD CONSTRAINT budgets_cycle CHECK (
        (account IS NULL AND feature IS NULL AND cycle_start IS NULL AND cycle_end IS NULL)
        OR (account IS NOT NULL AND feature IS NOT NULL AND cycle_start < cycle_end));

-- Not unique: budget_id already names (account, feature, cycle), and a second unique index
-- would not be an arbiter of the cycle's upsert, so that two sidecars creating one cycle at
-- once could fail on it instead of one of them updating the row.
CREATE INDEX budgets_account_cycle ON budgets (account, cycle_start)
    WHERE account IS NOT NULL;

CREATE TABLE accounts (
    account       text PRIMARY KEY,
    window_start  timestamptz,
    admissions    integer NOT NULL DEFAULT 0 CHECK (admissions >= 0)
);

CREATE TABLE meter_outbox (
    account          text NOT NULL,
    feature          text NOT NULL,
    cycle_start      timestamptz NOT NULL,
    total            bigint NOT NULL CHECK (total >= 0),
    at               timestamptz NOT NULL,
    version          bigint NOT NULL,
    PRIMARY KEY (account, feature, cycle_start)
);

CREATE TABLE meter_sent (
    account          text NOT NULL,
    feature          text NOT NULL,
    cycle_start      timestamptz NOT NULL,
    sent_version     bigint NOT NULL DEFAULT 0,
    sent_total       bigint,
    sent_at          timestamptz,
    attempts         integer NOT NULL DEFAULT 0,
    next_attempt_at  timestamptz,
    claimed_until    timestamptz,
    PRIMARY KEY (account, feature, cycle_start)
);
