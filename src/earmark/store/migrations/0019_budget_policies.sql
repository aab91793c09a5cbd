-- Budget policies (issue 34): periods on the calendar, threshold notices, shadow mode and
-- rate windows per budget.
--
-- Periods. A budget's row counts its current period, period_no (0 for a budget that has
-- never reset), [period_start, period_end) in UTC; both NULL for a budget that never
-- resets (period_end alone is set when a period was given to a budget that had none: it
-- takes effect at that boundary). period, timezone and period_anchor are the calendar the
-- next periods follow: a change takes effect at the next boundary. At the boundary the
-- first transaction that locks the row closes the period: its counters go to a row of
-- budget_periods and the budget starts again at zero used and zero held. A hold belongs
-- to the period of each of its budgets that it was reserved in (reservations.periods,
-- aligned with budget_id then also_budget_ids; NULL: period 0 of every one), and every
-- ledger row says which period it counts in, so that the audit's invariants hold for
-- every (budget, period):
--   used = sum(used_delta), held = sum(held_delta) over the ledger rows of the period
--   held = sum(amount - charged) over the period's open holds
--
-- Rate windows. admissions_per_minute and units_per_minute bound what a minute admits,
-- over a sliding window kept on the row (the article's first rule: a counter, not a scan):
-- the counts of the minute that began at rate_window_start and of the minute before it.
--
-- Notices. noticed_bps are the thresholds already noticed in the current period, and
-- exceeded_noticed whether a SOFT budget's pass of its limit was; the batch that crosses
-- one writes its event in the same transaction. Only batches write events; what the
-- deliverer did is in event_deliveries, which only the deliverer writes, so that a
-- delivery never conflicts with a serializable batch (as meter_outbox and meter_sent).

ALTER TABLE budgets
    ADD COLUMN period smallint NOT NULL DEFAULT 0 CHECK (period BETWEEN 0 AND 5),
    ADD COLUMN timezone text NOT NULL DEFAULT '',
    ADD COLUMN period_anchor smallint NOT NULL DEFAULT 0 CHECK (period_anchor BETWEEN 0 AND 31),
    ADD COLUMN period_no integer NOT NULL DEFAULT 0 CHECK (period_no >= 0),
    ADD COLUMN period_start timestamptz,
    ADD COLUMN period_end timestamptz,
    ADD COLUMN threshold_bps integer[] NOT NULL DEFAULT '{}',
    ADD COLUMN noticed_bps integer[] NOT NULL DEFAULT '{}',
    ADD COLUMN exceeded_noticed boolean NOT NULL DEFAULT false,
    -- 1 ENFORCE, 2 OBSERVE: the numbers of the wire enum BudgetMode.
    ADD COLUMN mode smallint NOT NULL DEFAULT 1 CHECK (mode IN (1, 2)),
    ADD COLUMN admissions_per_minute bigint CHECK (admissions_per_minute > 0),
    ADD COLUMN units_per_minute bigint CHECK (units_per_minute > 0),
    ADD COLUMN rate_window_start timestamptz,
    ADD COLUMN rate_admissions bigint NOT NULL DEFAULT 0 CHECK (rate_admissions >= 0),
    ADD COLUMN rate_units bigint NOT NULL DEFAULT 0 CHECK (rate_units >= 0),
    ADD COLUMN rate_prev_admissions bigint NOT NULL DEFAULT 0 CHECK (rate_prev_admissions >= 0),
    ADD COLUMN rate_prev_units bigint NOT NULL DEFAULT 0 CHECK (rate_prev_units >= 0),
    ADD CONSTRAINT budgets_period_window CHECK (period_start IS NULL OR period_end IS NULL
        OR period_start < period_end);

-- A closed period: the counters its holds still move (a hold open across the boundary
-- settles here), and the audit's ceiling for it.
CREATE TABLE budget_periods (
    budget_id          text NOT NULL REFERENCES budgets (budget_id),
    period_no          integer NOT NULL CHECK (period_no >= 0),
    period_start       timestamptz,
    period_end         timestamptz NOT NULL,
    limit_units        bigint,
    used               bigint NOT NULL,
    held               bigint NOT NULL CHECK (held >= 0),
    open_reservations  bigint NOT NULL CHECK (open_reservations >= 0),
    ceiling_max        bigint,
    PRIMARY KEY (budget_id, period_no)
);

ALTER TABLE reservations ADD COLUMN periods integer[];

ALTER TABLE ledger ADD COLUMN period_no integer NOT NULL DEFAULT 0;

-- The batches' rows (migration 0012's row types): a ledger row says its period; a
-- budget's row carries its period, notices and rate counters, and whether this batch
-- closed its period (then its ceiling starts again from its limit).
ALTER TYPE write_ledger ADD ATTRIBUTE period_no integer;
ALTER TYPE write_budget_totals
    ADD ATTRIBUTE period_no integer,
    ADD ATTRIBUTE period_start timestamptz,
    ADD ATTRIBUTE period_end timestamptz,
    ADD ATTRIBUTE noticed_bps integer[],
    ADD ATTRIBUTE exceeded_noticed boolean,
    ADD ATTRIBUTE rate_window_start timestamptz,
    ADD ATTRIBUTE rate_admissions bigint,
    ADD ATTRIBUTE rate_units bigint,
    ADD ATTRIBUTE rate_prev_admissions bigint,
    ADD ATTRIBUTE rate_prev_units bigint,
    ADD ATTRIBUTE rolled boolean;

CREATE TYPE write_event AS (
    event_id    text,
    kind        text,
    budget_id   text,
    dedupe_key  text,
    payload     jsonb,
    created_at  timestamptz
);

-- A budget in OBSERVE admits past its limit: while it observes, its ceiling is unbounded
-- (NULL), as for an unlimited budget, so that the audit never calls what it admitted a
-- violation (once ENFORCE again, the highest ceiling stays unbounded for the period).
CREATE OR REPLACE FUNCTION budgets_ceiling_max() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    ceiling bigint := CASE
        WHEN NEW.limit_units IS NULL OR NEW.mode = 2 THEN NULL
        WHEN NEW.overage_policy = 2 THEN NEW.limit_units + NEW.overage_limit
        ELSE NEW.limit_units
    END;
BEGIN
    IF TG_OP = 'INSERT' THEN
        NEW.ceiling_max := ceiling;
    ELSIF OLD.ceiling_max IS NULL OR ceiling IS NULL THEN
        NEW.ceiling_max := NULL;
    ELSE
        NEW.ceiling_max := greatest(OLD.ceiling_max, ceiling);
    END IF;
    RETURN NEW;
END;
$$;

DROP TRIGGER budgets_ceiling_max_update ON budgets;
CREATE TRIGGER budgets_ceiling_max_update
    BEFORE UPDATE OF limit_units, overage_policy, overage_limit, mode ON budgets
    FOR EACH ROW EXECUTE FUNCTION budgets_ceiling_max();

-- Notices: written by the batch that crossed a threshold, went past a SOFT limit or put a
-- hold in doubt, at most once per dedupe key (budget, period and threshold; or hold).
-- event_id is the Standard Webhooks message id, the same on every delivery attempt.
CREATE TABLE events (
    seq         bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    event_id    text NOT NULL UNIQUE,
    kind        text NOT NULL
                CHECK (kind IN ('budget.threshold_crossed', 'budget.exceeded', 'hold.in_doubt')),
    budget_id   text NOT NULL,
    dedupe_key  text NOT NULL UNIQUE,
    payload     jsonb NOT NULL,
    created_at  timestamptz NOT NULL
);

-- What the deliverer did with each event: delivered_at once the receiver answered 2xx,
-- failed_at once it gave up (attempts past limits.notify_attempts_max); otherwise due at
-- next_attempt_at (NULL: at once).
CREATE TABLE event_deliveries (
    seq              bigint PRIMARY KEY REFERENCES events (seq),
    attempts         integer NOT NULL DEFAULT 0,
    next_attempt_at  timestamptz,
    delivered_at     timestamptz,
    failed_at        timestamptz,
    last_error       text NOT NULL DEFAULT ''
);

-- One deliverer at a time across every sidecar on the database: the holder of this row's
-- lease, renewed while it delivers; a sidecar that died lets its lease run out.
CREATE TABLE notify_lease (
    only_row  boolean PRIMARY KEY DEFAULT true CHECK (only_row),
    holder    text NOT NULL,
    until     timestamptz NOT NULL
);
