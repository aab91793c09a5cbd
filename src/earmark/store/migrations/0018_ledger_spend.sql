-- What a budget spent over a time range (Admin's GetSpend, the console's spend page): the
-- entries of one budget that moved used, in the range, with what the sums need. Without
-- it every call read the budget's whole ledger whatever the range (ledger_budget is by
-- entry_id, not time), seconds for a budget of millions of entries, on one of Admin's two
-- scan slots. Partial: a hold's own entry and its renewals move no used and stay out.
--
-- Building it reads the ledger once and holds the ledger's appends until it commits (under
-- a second for ten million entries, measured); it only adds, so the previous release runs
-- on it as it is.
CREATE INDEX ledger_spend ON ledger (budget_id, at) INCLUDE (reservation_id, used_delta)
    WHERE used_delta <> 0;
