-- Issue 44. price.changed: a notice when a price version takes effect. noticed_at is when
-- its notice was written (NULL: not yet): a put in effect at once writes it in its own
-- transaction; the repricer's pass notices the versions whose effective_from has passed
-- since, found by the partial index (the un-noticed are the few dated in the future).
ALTER TABLE prices ADD COLUMN noticed_at timestamptz;

-- prices stays append-only (0004: a hold's price_version always names the rates it was
-- priced at), but for the one write a notice makes: noticed_at set once, nothing else.
CREATE FUNCTION prices_append_only() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'UPDATE' AND OLD.noticed_at IS NULL AND NEW.noticed_at IS NOT NULL
       AND to_jsonb(NEW) - 'noticed_at' = to_jsonb(OLD) - 'noticed_at' THEN
        RETURN NEW;
    END IF;
    RAISE EXCEPTION 'prices are append-only';
END;
$$;

DROP TRIGGER prices_append_only ON prices;
CREATE TRIGGER prices_append_only
    BEFORE UPDATE OR DELETE ON prices
    FOR EACH ROW EXECUTE FUNCTION prices_append_only();

-- The versions already in effect are not noticed now: an upgrade would post every version
-- there ever was. One dated in the future is noticed when it takes effect, as is one a
-- sidecar of the previous release puts while both run (it leaves noticed_at NULL).
UPDATE prices SET noticed_at = now() WHERE effective_from <= now();

CREATE INDEX prices_unnoticed ON prices (effective_from, price_id) WHERE noticed_at IS NULL;

-- price.changed. NOT VALID, as 0023's: the rows there are held to the check replaced,
-- which allows less, so they are not scanned (the events are never pruned).
ALTER TABLE events DROP CONSTRAINT events_kind_check;
ALTER TABLE events ADD CONSTRAINT events_kind_check CHECK (kind IN (
    'budget.threshold_crossed', 'budget.exceeded', 'budget.refusing', 'hold.in_doubt',
    'price.changed'))
    NOT VALID;
