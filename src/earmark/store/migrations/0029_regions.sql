-- Issue 48: budgets across regions (core/regions.py, docs/regions.md).
--
-- At a budget's home: each region's share of it, every counter cumulative and applied by
-- max (core.regions.HomeShare). The share's outstanding escrow, granted - max(returned,
-- reclaimed_to) - used when positive, is counted in the budget's held, and what the region
-- reported using in its used, so that every admission at the home (core.admission) fits
-- beside the shares as beside holds; ledger rows of kind 'share' (a grant, a return, a
-- report) and 'reclaim' (an expired share taken back) move them, and 'late_settle' rows
-- the use a region reported past its share. Their reason names the region.
CREATE TABLE region_shares (
    budget_id    text NOT NULL REFERENCES budgets (budget_id),
    region       text NOT NULL CHECK (region <> ''),
    granted      bigint NOT NULL DEFAULT 0 CHECK (granted >= 0),
    returned     bigint NOT NULL DEFAULT 0 CHECK (returned >= 0),
    used         bigint NOT NULL DEFAULT 0 CHECK (used >= 0),
    reclaimed_to bigint NOT NULL DEFAULT 0 CHECK (reclaimed_to >= 0),
    reclaimed    bigint NOT NULL DEFAULT 0 CHECK (reclaimed >= 0),
    -- On the home's clock.
    lease_until  timestamptz,
    heard_at     timestamptz,
    -- What the region's holds in doubt held at its newest report (sent at doubt_at on its
    -- clock): a reclaim leaves it held.
    doubt        bigint NOT NULL DEFAULT 0 CHECK (doubt >= 0),
    doubt_at     timestamptz,
    PRIMARY KEY (budget_id, region)
);

-- The reclaimer's scan: shares whose lease ended.
CREATE INDEX region_shares_lease ON region_shares (lease_until);

ALTER TABLE ledger DROP CONSTRAINT ledger_kind_check;
ALTER TABLE ledger ADD CONSTRAINT ledger_kind_check
    CHECK (kind IN ('hold', 'charge', 'settle', 'expire', 'late_settle', 'reprice',
                    'in_doubt', 'resolve', 'release', 'limit', 'share', 'reclaim'))
    NOT VALID;

-- In a region: its share of each budget homed elsewhere (core.regions.Region). The
-- budget's row there is the share: its limit is granted - returned, its share_until the
-- share's lease (the region's view), and its used what the region reports.
CREATE TABLE region_share_state (
    budget_id   text PRIMARY KEY REFERENCES budgets (budget_id),
    granted     bigint NOT NULL DEFAULT 0 CHECK (granted >= 0),
    returned    bigint NOT NULL DEFAULT 0 CHECK (returned >= 0),
    lease_until timestamptz
);

ALTER TABLE budgets ADD COLUMN share_until timestamptz;
