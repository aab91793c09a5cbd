-- Estimates learned per tenant (issue 32). job_samples was keyed by (unit, job, model):
-- every budget of a unit that ran a job of the same name learned from one history, so one
-- tenant's first estimate came from another tenant's calls. tenant_samples is keyed by
-- (unit, root, job, model), root being whose history it is (core/estimates.py
-- sample_root): an account's billing-cycle budgets share "account ACCOUNT" (a new cycle
-- keeps the history), any other budget is its own root. No budget id is empty or has a
-- space, so neither kind of root can be taken for the other, nor for ''.
--
-- A table of its own rather than a new key on job_samples, so that this migration only
-- adds: sidecars of the previous release, still serving during a roll, go on writing
-- job_samples with its key and row type, which this release no longer reads.
--
-- The samples kept before cannot be told apart by tenant: they are copied under root '',
-- which no Reserve reads and no Settle adds to. Kept rather than dropped so that nothing
-- is lost that an operator may know how to attribute: where one tenant ran a job, its
-- history can be given back to it (for a budget, the root is the budget's id):
--   INSERT INTO tenant_samples (unit, root, job, model, samples)
--   SELECT unit, 'account acct1', job, model, samples FROM tenant_samples
--   WHERE root = '' AND job = 'summarize'
--   ON CONFLICT DO NOTHING;

CREATE TABLE tenant_samples (
    unit        text NOT NULL,
    root        text NOT NULL,
    job         text NOT NULL,
    model       text NOT NULL,
    samples     jsonb NOT NULL,
    updated_at  timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (unit, root, job, model)
);

INSERT INTO tenant_samples (unit, root, job, model, samples, updated_at)
SELECT unit, '', job, model, samples, updated_at FROM job_samples;

-- The row a batch writes (migration 0012's write_samples, with the root in its key).
CREATE TYPE write_tenant_samples AS (
    unit     text,
    root     text,
    job      text,
    model    text,
    samples  jsonb
);
