-- What reconciliation needs of each provider call (issue 32): a provider's usage report has
-- no request ids, only counts per (minute, model, key or project), so the ledger keeps per
-- dispatched hold the provider, model and tier it was sent to, the minute it was sent, the
-- key or project it was sent with (the metered client's label "earmark.key"), and, once
-- settled with it, the usage the provider reported. A resolve by evidence
-- (`earmark reconcile --apply`) writes what its evidence was.
--
-- One row per hold, written when it is dispatched (the Reserve that charges the prompt, or
-- its first Charge) and completed by the Settle or resolve that gives its usage: the first
-- write's sent fields stay, later ones fill in the usage. A table of its own, so that this
-- migration only adds: sidecars of the previous release, still serving during a roll,
-- write reservations with its row type and never write here (their calls are reconciled
-- as calls without a record: see docs/reconcile.md).

CREATE TABLE calls (
    reservation_id            uuid PRIMARY KEY REFERENCES reservations (reservation_id),
    budget_id                 text NOT NULL,
    provider                  text NOT NULL,
    model                     text NOT NULL,
    service_tier              text NOT NULL,
    key_label                 text NOT NULL,
    sent_at                   timestamptz NOT NULL,
    -- The usage the provider reported, all null until a Settle or resolve gave it.
    input_tokens              bigint CHECK (input_tokens >= 0),
    cached_input_tokens       bigint CHECK (cached_input_tokens >= 0),
    cache_write_input_tokens  bigint CHECK (cache_write_input_tokens >= 0),
    output_tokens             bigint CHECK (output_tokens >= 0),
    requests                  bigint CHECK (requests >= 0),
    -- What a resolve's evidence was ('' for none).
    evidence                  text NOT NULL DEFAULT ''
);

-- Reconciliation reads a provider's calls over a time range.
CREATE INDEX calls_sent ON calls (provider, sent_at);

-- The row a batch writes (migration 0012's way), in the table's column order: null usage,
-- and evidence '', mean "keep what the row has".
CREATE TYPE write_call AS (
    reservation_id            uuid,
    budget_id                 text,
    provider                  text,
    model                     text,
    service_tier              text,
    key_label                 text,
    sent_at                   timestamptz,
    input_tokens              bigint,
    cached_input_tokens       bigint,
    cache_write_input_tokens  bigint,
    output_tokens             bigint,
    requests                  bigint,
    evidence                  text
);
