-- Issue 47. A budget's run limits: at most max_open_holds holds open at once, at most
-- max_admissions Reserves admitted (per period, with one), and nothing admitted from
-- closes_at on; admissions counts the current period's admitted Reserves and
-- admissions_period_no says which period it counts (as refusals_period_no, 0024: a row a
-- previous release's sidecar rolled reads as having admitted nothing in its new period).
-- A temporary limit: limit_units is in force until limit_until, then limit_after.
-- The template a budget was made from, its version, and whether an operator changed the
-- budget by hand since (then the template's changes no longer reach it).
-- Every column is nullable or has a constant default: adding them rewrites nothing.
ALTER TABLE budgets
    ADD COLUMN max_open_holds bigint CHECK (max_open_holds >= 0),
    ADD COLUMN max_admissions bigint CHECK (max_admissions >= 0),
    ADD COLUMN closes_at timestamptz,
    ADD COLUMN admissions bigint NOT NULL DEFAULT 0 CHECK (admissions >= 0),
    ADD COLUMN admissions_period_no integer NOT NULL DEFAULT 0,
    ADD COLUMN limit_until timestamptz,
    ADD COLUMN limit_after bigint,
    ADD COLUMN limit_reason text NOT NULL DEFAULT '',
    ADD COLUMN template_id text,
    ADD COLUMN template_version bigint NOT NULL DEFAULT 0,
    ADD COLUMN changed_by_hand boolean NOT NULL DEFAULT false,
    -- Holds still open from its closed periods (max_open_holds counts them).
    ADD COLUMN open_earlier bigint NOT NULL DEFAULT 0 CHECK (open_earlier >= 0);

UPDATE budgets b SET open_earlier = p.open
FROM (SELECT budget_id, sum(open_reservations) AS open FROM budget_periods GROUP BY budget_id) p
WHERE b.budget_id = p.budget_id AND p.open > 0;

-- The batches' budget row with the admissions counter, a type of a new name beside
-- write_budget_totals_2 (0023), which the previous release keeps sending while both run.
CREATE TYPE write_budget_totals_3 AS (
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
    last_refused_at       timestamptz,
    refusing_noticed      boolean,
    admissions            bigint,
    open_earlier          bigint
);

-- A change of a budget's limit by an operator's temporary raise, or its end: a ledger
-- entry of kind 'limit' that moves nothing, with the limits before and after, until when,
-- and why. Nullable without defaults: adding them rewrites no row of the ledger.
ALTER TABLE ledger
    ADD COLUMN limit_before bigint,
    ADD COLUMN limit_after bigint,
    ADD COLUMN limit_until timestamptz,
    ADD COLUMN reason text;

-- NOT VALID, as 0023's event check: the rows there are held to the check replaced, which
-- allows less, so the ledger is not scanned.
ALTER TABLE ledger DROP CONSTRAINT ledger_kind_check;
ALTER TABLE ledger ADD CONSTRAINT ledger_kind_check
    CHECK (kind IN ('hold', 'charge', 'settle', 'expire', 'late_settle', 'reprice',
                    'in_doubt', 'resolve', 'release', 'limit'))
    NOT VALID;

ALTER TABLE events DROP CONSTRAINT events_kind_check;
ALTER TABLE events ADD CONSTRAINT events_kind_check CHECK (kind IN (
    'budget.threshold_crossed', 'budget.exceeded', 'budget.refusing', 'hold.in_doubt',
    'price.changed', 'budget.limit_changed'))
    NOT VALID;

-- Budget templates: a Reserve naming a budget that does not exist but matches pattern makes
-- it from spec (core.specs.Fields as JSON) in the transaction that decides the admission.
-- A pattern is unique; no two patterns match one id (checked by PutBudgetTemplate under
-- the table's lock).
CREATE TABLE budget_templates (
    template_id  text PRIMARY KEY,
    pattern      text NOT NULL UNIQUE,
    spec         jsonb NOT NULL,
    version      bigint NOT NULL CHECK (version >= 1),
    updated_at   timestamptz NOT NULL,
    -- How many budgets it made (at most limits.template_budgets_max).
    made         bigint NOT NULL DEFAULT 0 CHECK (made >= 0)
);

-- Versions from one sequence: a template removed and put again under its id never repeats
-- a version a budget made from the old one has.
CREATE SEQUENCE budget_template_versions;

-- The budgets whose temporary limit the sweeper ends (store/sweeper.py lapse_raises): few,
-- found by when their limit ends without reading the others.
CREATE INDEX budgets_limit_until ON budgets (limit_until) WHERE limit_until IS NOT NULL;
