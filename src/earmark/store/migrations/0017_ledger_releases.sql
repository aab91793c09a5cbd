-- Which holds an operator released (issue 33). ReleaseHold closes a hold as the lapse of its
-- lease does (state 3, expired: it keeps what it charged and the rest returns), so the row
-- alone cannot tell the two apart; its ledger's 'release' entry does. Admin's ListHolds
-- looks that entry up for each expired hold of a page: by this index, one probe each,
-- rather than a scan of the budget's whole ledger (ledger_budget is by entry_id).
--
-- Partial: only release entries are in it, so the ledger's other appends (a hold's, each
-- charge's, each settle's) never write to it. Building it reads the ledger once, as the
-- ledger_kind_check of 0007 did; it only adds, so the previous release runs on it as it is.
CREATE INDEX ledger_releases ON ledger (reservation_id) WHERE kind = 'release';
