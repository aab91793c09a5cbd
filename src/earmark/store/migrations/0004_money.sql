-- Money: a versioned price book, holds priced from tokens, and estimates that learn.
--
-- prices is append-only, like the ledger: a version is never changed or deleted, so a
-- hold's price_version always names the rates it was priced at. price_id orders every
-- version of every model; a sidecar reloads its cached price book when max(price_id)
-- moved.
--
-- job_samples keeps, per (unit, job, model), the most recent settled usages of the job's
-- SUCCEEDED holds (model '' collects the job's samples of every model), as one small
-- row per key: estimates read one row, settles rewrite it.

CREATE TABLE prices (
    price_id                  bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    provider                  text NOT NULL,
    model                     text NOT NULL,
    version                   bigint NOT NULL CHECK (version > 0),
    effective_from            timestamptz NOT NULL,
    effective_to              timestamptz CHECK (effective_to > effective_from),
    input_per_mtok            bigint NOT NULL CHECK (input_per_mtok >= 0),
    output_per_mtok           bigint NOT NULL CHECK (output_per_mtok >= 0),
    cached_input_per_mtok     bigint NOT NULL CHECK (cached_input_per_mtok >= 0),
    request_fee               bigint NOT NULL CHECK (request_fee >= 0),
    source                    text NOT NULL,
    captured_at               timestamptz,
    daily_from_minute         integer NOT NULL CHECK (daily_from_minute BETWEEN 0 AND 1439),
    daily_to_minute           integer NOT NULL CHECK (daily_to_minute BETWEEN 0 AND 1439),
    created_at                timestamptz NOT NULL DEFAULT now(),
    UNIQUE (provider, model, version)
);

CREATE TRIGGER prices_append_only
    BEFORE UPDATE OR DELETE ON prices
    FOR EACH ROW EXECUTE FUNCTION ledger_append_only();

ALTER TABLE budgets
    ADD COLUMN default_estimate bigint CHECK (default_estimate > 0),
    ADD COLUMN estimate_policy smallint NOT NULL DEFAULT 1 CHECK (estimate_policy IN (1, 2));

-- source: the wire's EstimateSource. shape: the UsageShape a hold was priced from, as a
-- compact JSON array [provider, model, input, max_output, cached_input, attempts] in text
-- (every version of the row carries it: keys and jsonb would make each one wider).
ALTER TABLE reservations
    ADD COLUMN source smallint NOT NULL DEFAULT 1 CHECK (source BETWEEN 1 AND 6),
    ADD COLUMN price_version bigint NOT NULL DEFAULT 0,
    ADD COLUMN shape text,
    ADD COLUMN job text NOT NULL DEFAULT '',
    ADD COLUMN settled_price_version bigint;

ALTER TABLE charges ADD COLUMN price_version bigint NOT NULL DEFAULT 0;

ALTER TABLE ledger DROP CONSTRAINT ledger_kind_check;
ALTER TABLE ledger ADD CONSTRAINT ledger_kind_check
    CHECK (kind IN ('hold', 'charge', 'settle', 'expire', 'late_settle', 'reprice'));

CREATE TABLE job_samples (
    unit        text NOT NULL,
    job         text NOT NULL,
    model       text NOT NULL,
    samples     jsonb NOT NULL,
    updated_at  timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (unit, job, model)
);
