-- A budget's ceiling (the audit's: its limit, and under SOFT the overage past it; NULL
-- unbounded, or observed) stated once: the trigger that keeps ceiling_max and the batch
-- that starts a new period's ceiling both call it, rather than each spelling the rule.

CREATE FUNCTION budget_ceiling(limit_units bigint, overage_policy smallint,
                               overage_limit bigint, mode smallint)
RETURNS bigint LANGUAGE sql IMMUTABLE AS $$
    SELECT CASE
        WHEN limit_units IS NULL OR mode = 2 THEN NULL
        WHEN overage_policy = 2 THEN limit_units + overage_limit
        ELSE limit_units
    END
$$;

CREATE OR REPLACE FUNCTION budgets_ceiling_max() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    ceiling bigint := budget_ceiling(NEW.limit_units, NEW.overage_policy, NEW.overage_limit,
                                     NEW.mode);
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
