"""What the ledger keeps of each provider call for reconciliation: the provider, model and
tier it was sent to, when, with which key or project, and, once known, the usage the
provider reported (docs/reconcile.md). A provider's usage report has no request ids, only
counts per minute, model and key, so these are what a bucket of it is compared with."""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import datetime

from earmark.core.model import Hold
from earmark.core.prices import Usage

# The label a metered client sets to the provider key's or project's id (Meter.key_label):
# reconciliation compares a key's report with the calls sent with that key.
KEY_LABEL = "earmark.key"


@dataclass(frozen=True, slots=True)
class CallRecord:
    """One provider call as a batch writes it. usage None and evidence "" keep what the
    stored row has: a record first written when the call was sent gains its usage later."""

    reservation_id: str
    budget_id: str
    provider: str
    model: str
    service_tier: str
    key_label: str
    sent_at: datetime
    usage: Usage | None = None
    evidence: str = ""


def sent(records: dict[str, CallRecord], hold: Hold, usage: Usage | None, now: datetime) -> None:
    """Records that hold's call went to its provider now (it was dispatched), if the hold
    names a provider (by its shape, or the usage it was charged with)."""
    if hold.reservation_id in records:
        return
    record = _record(hold, usage, now)
    if record is not None:
        records[hold.reservation_id] = record


def reported(records: dict[str, CallRecord], hold: Hold, usage: Usage, evidence: str = "") -> None:
    """Records the usage a Settle or resolve gave for hold's call (all of it, as the
    provider reported it), and the tier it names, which it was priced at (a call sent on
    the default tier may have run on another). A call whose dispatch was not recorded (a
    hold of the previous release) is recorded as sent when the hold was made."""
    earlier = records.get(hold.reservation_id) or _record(hold, usage, hold.created_at)
    if earlier is not None:
        tier = usage.service_tier or earlier.service_tier
        records[hold.reservation_id] = replace(
            earlier, usage=usage, evidence=evidence, service_tier=tier
        )


def resolved(records: dict[str, CallRecord], hold: Hold, evidence: str) -> None:
    """Records the evidence a resolve by amount named, if hold's call is a provider call."""
    if not evidence:
        return
    earlier = records.get(hold.reservation_id) or _record(hold, None, hold.created_at)
    if earlier is not None:
        records[hold.reservation_id] = replace(earlier, evidence=evidence)


def _record(hold: Hold, usage: Usage | None, at: datetime) -> CallRecord | None:
    shape = hold.shape
    provider = (usage.provider if usage else "") or (shape.provider if shape else "")
    model = (usage.model if usage else "") or (shape.model if shape else "")
    tier = (usage.service_tier if usage else "") or (shape.service_tier if shape else "")
    if not provider or not model:
        return None
    return CallRecord(
        reservation_id=hold.reservation_id,
        budget_id=hold.budget_id,
        provider=provider,
        model=model,
        service_tier=tier,
        key_label=hold.labels.get(KEY_LABEL, ""),
        sent_at=at,
    )
