-- Budgets, their holds, the answers to charges, and the append-only ledger.
-- Invariants, at every commit:
--   budgets.held = sum(amount - charged) over the budget's reservations in state 1 (held)
--   budgets.used = sum(used_delta) over the budget's ledger rows
--   budgets.held = sum(held_delta) over the budget's ledger rows

CREATE TABLE budgets (
    budget_id          text PRIMARY KEY,
    limit_units        bigint CHECK (limit_units IS NULL OR limit_units >= 0),
    unit               text NOT NULL,
    used               bigint NOT NULL DEFAULT 0,
    held               bigint NOT NULL DEFAULT 0 CHECK (held >= 0),
    open_reservations  bigint NOT NULL DEFAULT 0 CHECK (open_reservations >= 0),
    created_at         timestamptz NOT NULL DEFAULT now(),
    updated_at         timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE reservations (
    reservation_id     uuid PRIMARY KEY,
    budget_id          text NOT NULL REFERENCES budgets (budget_id),
    idempotency_key    text NOT NULL,
    amount             bigint NOT NULL CHECK (amount > 0),
    charged            bigint NOT NULL DEFAULT 0 CHECK (charged >= 0),
    -- 1 held, 2 settled, 3 expired: the numbers of the wire enum ReservationState.
    state              smallint NOT NULL CHECK (state IN (1, 2, 3)),
    lease_ms           bigint NOT NULL CHECK (lease_ms > 0),
    expires_at         timestamptz NOT NULL,
    created_at         timestamptz NOT NULL,
    closed_at          timestamptz,
    labels             jsonb NOT NULL DEFAULT '{}'::jsonb,
    -- The first Settle's request and answer, so that a repeated Settle answers the same.
    settled_used       bigint,
    settled_outcome    smallint,
    settled_charged    bigint,
    settled_released   bigint,
    settled_overshoot  bigint,
    CONSTRAINT reservations_idempotency UNIQUE (budget_id, idempotency_key)
);

-- The sweeper's scan: only live holds, ordered by deadline.
CREATE INDEX reservations_due ON reservations (expires_at) WHERE state = 1;

CREATE TABLE charges (
    reservation_id     uuid NOT NULL REFERENCES reservations (reservation_id),
    idempotency_key    text NOT NULL,
    amount             bigint NOT NULL,
    charged            bigint NOT NULL,
    capped             boolean NOT NULL,
    total_charged      bigint NOT NULL,
    hold_remaining     bigint NOT NULL,
    created_at         timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (reservation_id, idempotency_key)
);

CREATE TABLE ledger (
    entry_id           bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    budget_id          text NOT NULL REFERENCES budgets (budget_id),
    reservation_id     uuid,
    kind               text NOT NULL
                       CHECK (kind IN ('hold', 'charge', 'settle', 'expire', 'late_settle')),
    held_delta         bigint NOT NULL,
    used_delta         bigint NOT NULL,
    at                 timestamptz NOT NULL
);

CREATE INDEX ledger_budget ON ledger (budget_id, entry_id);

-- The ledger is append-only: an UPDATE or DELETE is a bug, so it fails loudly.
CREATE FUNCTION ledger_append_only() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'the ledger is append-only';
END;
$$;

CREATE TRIGGER ledger_append_only
    BEFORE UPDATE OR DELETE ON ledger
    FOR EACH ROW EXECUTE FUNCTION ledger_append_only();
