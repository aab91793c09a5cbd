-- Input written to the provider's cache has a rate of its own (Anthropic's cache writes):
-- 0, as for every price stored before, means the input rate.
ALTER TABLE prices ADD COLUMN cache_write_per_mtok bigint NOT NULL DEFAULT 0
    CHECK (cache_write_per_mtok >= 0);
