-- Scopes, phases and policies: one hold across nested budgets, an output escrow, a policy
-- beside each cap, in-doubt holds, and archived budgets.
--
-- A reservation still has one budget_id (its idempotency keys and routing stay there);
-- also_budget_ids lists the other budgets it holds the same amount on. hold_scopes indexes
-- those for the operator's ListHolds, in the order of the reservations' own unique index
-- (budget_id, owner, idempotency_key), so that one keyset pages through both. Holds on one
-- budget alone write nothing there.
--
-- Invariants, at every commit, for each budget over the holds of which it is budget_id or
-- one of also_budget_ids:
--   budgets.held = sum(amount - charged) over those in state 1 (held) or 4 (in doubt)
--   budgets.open_reservations = count of those in state 1 or 4
--   hold_scopes holds exactly one row per entry of also_budget_ids
--   in_doubt_holds holds exactly the reservations in state 4
-- open_holds keeps its meaning (state 1 only): it is the sweeper's queue, and an in-doubt
-- hold is not the sweeper's to close.

ALTER TABLE budgets
    ADD COLUMN escrow_bps integer NOT NULL DEFAULT 0
        CHECK (escrow_bps >= 0 AND escrow_bps < 10000),
    -- 1 hard, 2 soft: the numbers of the wire enum OveragePolicy.
    ADD COLUMN overage_policy smallint NOT NULL DEFAULT 1 CHECK (overage_policy IN (1, 2)),
    ADD COLUMN overage_limit bigint CHECK (overage_limit IS NULL OR overage_limit >= 0),
    ADD COLUMN overage_since timestamptz,
    ADD COLUMN archived_at timestamptz;

ALTER TABLE reservations
    ADD COLUMN also_budget_ids text[] NOT NULL DEFAULT '{}',
    -- A Charge was made: the provider may have accepted the call from then on.
    ADD COLUMN dispatched boolean NOT NULL DEFAULT false,
    -- 1 work, 2 final: the numbers of the wire enum Phase.
    ADD COLUMN phase smallint NOT NULL DEFAULT 1 CHECK (phase IN (1, 2));

ALTER TABLE reservations DROP CONSTRAINT reservations_state_check;
ALTER TABLE reservations ADD CONSTRAINT reservations_state_check CHECK (state IN (1, 2, 3, 4));

CREATE TABLE hold_scopes (
    budget_id        text NOT NULL REFERENCES budgets (budget_id),
    owner            text NOT NULL,
    idempotency_key  text NOT NULL,
    reservation_id   uuid NOT NULL REFERENCES reservations (reservation_id),
    PRIMARY KEY (budget_id, owner, idempotency_key, reservation_id)
);

CREATE TABLE in_doubt_holds (
    reservation_id  uuid PRIMARY KEY REFERENCES reservations (reservation_id),
    since           timestamptz NOT NULL
);

ALTER TABLE ledger DROP CONSTRAINT ledger_kind_check;
ALTER TABLE ledger ADD CONSTRAINT ledger_kind_check
    CHECK (kind IN ('hold', 'charge', 'settle', 'expire', 'late_settle', 'reprice',
                    'in_doubt', 'resolve', 'release'));

-- The audit's ceiling. An operator may lower a limit below what was admitted under the
-- old one; the audit cannot know each admission's limit then, so it checks spend against
-- the highest ceiling the budget ever had (NULL: unbounded at some time, never checked):
-- sound, never a false alarm. A trigger keeps it, and fires only on statements that set
-- the limit or the policy, never on a batch's counter updates.
ALTER TABLE budgets ADD COLUMN ceiling_max bigint;

UPDATE budgets SET ceiling_max = limit_units;

CREATE FUNCTION budgets_ceiling_max() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    ceiling bigint := CASE
        WHEN NEW.limit_units IS NULL THEN NULL
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

CREATE TRIGGER budgets_ceiling_max_insert
    BEFORE INSERT ON budgets
    FOR EACH ROW EXECUTE FUNCTION budgets_ceiling_max();

CREATE TRIGGER budgets_ceiling_max_update
    BEFORE UPDATE OF limit_units, overage_policy, overage_limit ON budgets
    FOR EACH ROW EXECUTE FUNCTION budgets_ceiling_max();
