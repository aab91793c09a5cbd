-- Issue 43. What a budget's thresholds measure (1: used + held, 2: used alone), and the
-- Reserves it refused for want of room in its current period: how many, the first (whose
-- batch writes the budget.refusing notice) and the latest. A new period starts the count
-- again (the batch that rolls the period writes it at 0).
ALTER TABLE budgets
    ADD COLUMN threshold_basis smallint NOT NULL DEFAULT 1 CHECK (threshold_basis IN (1, 2)),
    ADD COLUMN refusals bigint NOT NULL DEFAULT 0 CHECK (refusals >= 0),
    ADD COLUMN first_refused_at timestamptz,
    ADD COLUMN last_refused_at timestamptz;

-- The batches' budget row with the refusal counters, a type of a new name beside
-- write_budget_totals (0022), which the previous release keeps sending while both run.
CREATE TYPE write_budget_totals_2 AS (
    budget_id             text,
    used                  bigint,
    held                  bigint,
    open_reservations     bigint,
    overage_since         timestamptz,
    period_no             integer,
    period_start          timestamptz,
    period_end            timestamptz,
    noticed_bps           integer[],
    exceeded_noticed      boolean,
    rate_window_start     timestamptz,
    rate_admissions       bigint,
    rate_units            bigint,
    rate_prev_admissions  bigint,
    rate_prev_units       bigint,
    rolled                boolean,
    refusals              bigint,
    first_refused_at      timestamptz,
    last_refused_at       timestamptz
);

-- The budget.refusing notice. NOT VALID: the rows there are held to the check replaced,
-- which allows less, so they are not scanned (the events are never pruned, and the scan
-- would hold the lock on budgets this transaction took above for its length).
ALTER TABLE events DROP CONSTRAINT events_kind_check;
ALTER TABLE events ADD CONSTRAINT events_kind_check CHECK (kind IN (
    'budget.threshold_crossed', 'budget.exceeded', 'budget.refusing', 'hold.in_doubt'))
    NOT VALID;
