-- Issue 43. refusing_noticed: budget.refusing was written since the period began or the
-- limit last changed (a put that changes the limit clears it, so a budget that never
-- resets is told again when its new limit refuses). refusals_period_no: the period the
-- refusal columns count, which the batches write beside them: a row whose period a
-- previous release's sidecar rolled (it writes write_budget_totals, which knows nothing of
-- refusals) reads as having refused nothing in its new period, not the last one's count.
ALTER TABLE budgets
    ADD COLUMN refusing_noticed boolean NOT NULL DEFAULT false,
    ADD COLUMN refusals_period_no integer NOT NULL DEFAULT 0;

-- 0023's type, of this same release: no earlier release sends it.
ALTER TYPE write_budget_totals_2 ADD ATTRIBUTE refusing_noticed boolean;
