-- The rows a batch writes into reservations, hold_scopes, in_doubt_holds, open_holds,
-- accounts and budget_periods, as composite types of their own, as 0012 did for the
-- others. The batch cast its arrays to these tables' own row types, so a migration that
-- added a column to one of them changed the type the previous release's sidecars send:
-- their rows came one attribute short and every such write failed ("wrong number of
-- columns") until they were stopped, which is what 0019 (reservations.periods) did to the
-- release before it. These types belong to the writes alone: a later migration adds a
-- column to a table without touching them (the writes name their columns, and a new
-- column takes its default), and when a release must write a new column it creates a
-- type of a new name beside these, which the previous release keeps using.
-- tests/store/test_writes.py checks that no statement of the store casts to a table's row
-- type, and that these attributes are the ones store/writes.py sends.

CREATE TYPE write_hold AS (
    reservation_id         uuid,
    budget_id              text,
    idempotency_key        text,
    amount                 bigint,
    charged                bigint,
    state                  smallint,
    lease_ms               bigint,
    expires_at             timestamptz,
    created_at             timestamptz,
    closed_at              timestamptz,
    labels                 jsonb,
    settled_used           bigint,
    settled_outcome        smallint,
    settled_charged        bigint,
    settled_released       bigint,
    settled_overshoot      bigint,
    owner                  text,
    source                 smallint,
    price_version          bigint,
    shape                  text,
    job                    text,
    settled_price_version  bigint,
    also_budget_ids        text[],
    dispatched             boolean,
    phase                  smallint,
    periods                integer[]
);

CREATE TYPE write_hold_scope AS (
    budget_id        text,
    owner            text,
    idempotency_key  text,
    reservation_id   uuid
);

CREATE TYPE write_in_doubt AS (
    reservation_id  uuid,
    since           timestamptz
);

CREATE TYPE write_open_hold AS (
    reservation_id  uuid,
    expires_at      timestamptz
);

CREATE TYPE write_account AS (
    account       text,
    window_start  timestamptz,
    admissions    integer
);

CREATE TYPE write_budget_period AS (
    budget_id          text,
    period_no          integer,
    period_start       timestamptz,
    period_end         timestamptz,
    limit_units        bigint,
    used               bigint,
    held               bigint,
    open_reservations  bigint
);
