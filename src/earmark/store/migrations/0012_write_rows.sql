-- The rows a batch writes, as composite types, so that its one statement takes one array
-- parameter per kind of row (asyncpg encodes a list of tuples as an array of a composite
-- type) rather than one array per column. Where a table's own row is exactly what is
-- written (reservations, open_holds, in_doubt_holds, hold_scopes, accounts) the statement
-- uses the table's row type; these are the others. Their attributes are declared once more
-- in store/writes.py, and tests/store/test_writes.py compares the two.

CREATE TYPE write_charge AS (
    reservation_id   uuid,
    idempotency_key  text,
    amount           bigint,
    charged          bigint,
    capped           boolean,
    total_charged    bigint,
    hold_remaining   bigint,
    price_version    bigint
);

CREATE TYPE write_ledger AS (
    budget_id       text,
    reservation_id  uuid,
    kind            text,
    held_delta      bigint,
    used_delta      bigint,
    at              timestamptz
);

CREATE TYPE write_meter_move AS (
    account      text,
    feature      text,
    cycle_start  timestamptz,
    cycle_end    timestamptz,
    used_delta   bigint,
    at           timestamptz
);

CREATE TYPE write_samples AS (
    unit     text,
    job      text,
    model    text,
    samples  jsonb
);

CREATE TYPE write_budget_totals AS (
    budget_id          text,
    used               bigint,
    held               bigint,
    open_reservations  bigint,
    overage_since      timestamptz
);
