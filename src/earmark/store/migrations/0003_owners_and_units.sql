-- Worker tokens and bounded units.
--
-- A reservation belongs to the worker token that made it (owner is the token's name, ""
-- when the sidecar runs without tokens), and idempotency keys are scoped to it: another
-- token's Reserve with the same budget and key makes a reservation of its own instead of
-- receiving this one's id.
--
-- units lists every unit a budget was ever given, so that PutBudget can bound how many
-- there are (limits.units_max) without counting over budgets: the unit is a label on
-- the database gauges, and label values must be bounded.

ALTER TABLE reservations ADD COLUMN owner text NOT NULL DEFAULT '';

ALTER TABLE reservations DROP CONSTRAINT reservations_idempotency;
ALTER TABLE reservations
    ADD CONSTRAINT reservations_idempotency UNIQUE (budget_id, owner, idempotency_key);

CREATE TABLE units (
    unit        text PRIMARY KEY,
    created_at  timestamptz NOT NULL DEFAULT now()
);

INSERT INTO units (unit) SELECT DISTINCT unit FROM budgets;
