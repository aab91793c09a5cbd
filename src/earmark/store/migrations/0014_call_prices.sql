-- Every billed quantity priced (issue 31). A price version may name the model's output
-- ceiling (the cap a call that sets none is sent with; 0: unknown), a rate for cache
-- writes kept an hour (0: the cache_write rate), the service tier its rates are for (''
-- is the default tier: a price is looked up by provider, model and tier; versions still
-- count per provider and model), and a fee per server tool call, by kind ({"web_search":
-- 10000}). 0 and '' are what every price stored before means.
ALTER TABLE prices
    ADD COLUMN max_output_tokens bigint NOT NULL DEFAULT 0 CHECK (max_output_tokens >= 0),
    ADD COLUMN cache_write_long_per_mtok bigint NOT NULL DEFAULT 0
        CHECK (cache_write_long_per_mtok >= 0),
    ADD COLUMN service_tier text NOT NULL DEFAULT '',
    ADD COLUMN tool_fees jsonb NOT NULL DEFAULT '{}'::jsonb
        CHECK (jsonb_typeof(tool_fees) = 'object');
