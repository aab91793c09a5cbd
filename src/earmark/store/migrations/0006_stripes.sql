-- Budget stripes: a batch's transaction waits for the budgets it decides before it starts,
-- rather than aborting after.
--
-- Under SERIALIZABLE a transaction's snapshot is taken by its first query. Two sidecars'
-- batches on one budget that both took theirs can only end with one aborting: a row lock
-- waited for after the snapshot does not make the other's write visible. LOCK TABLE takes
-- no snapshot (PostgreSQL's documented way to wait before one), so a batch's first
-- statement locks the stripes of its budgets: a batch on the same budgets waits there
-- until this one commits, then takes a snapshot that sees its writes, and the two never
-- overlap. A budget's stripe is crc32(budget_id) mod the number of stripes (64; the
-- store asserts it against limits.budget_stripes). The tables hold nothing; only their
-- locks are used, and they are held to the end of the transaction, so this works through
-- PgBouncer's transaction pooling, unlike session advisory locks.
CREATE SCHEMA earmark_stripes;

DO $$
BEGIN
    FOR stripe IN 0..63 LOOP
        EXECUTE format('CREATE TABLE earmark_stripes.s%s ()', lpad(stripe::text, 2, '0'));
    END LOOP;
END
$$;
