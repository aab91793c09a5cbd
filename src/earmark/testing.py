"""Test doubles for people who write workers, and for Earmark's own tests.

`FakeClock` is the clock a sidecar or store takes (`Sidecar(settings, clock=...)`): time
moves only when the test says, so a test of leases, expiry or periods waits for nothing.
`assert_invariants` checks a database the way `earmark audit` does: every budget and
period's used and held equal its ledger and its open holds, and the side tables agree.

They are test doubles: what they promise under concurrency comes from PostgreSQL, which a
test of races must run (as Earmark's own tests do)."""

from __future__ import annotations

from datetime import datetime, timedelta


class FakeClock:
    """The injected clock of a store or sidecar under test: time moves only when told."""

    def __init__(self, at: datetime) -> None:
        self.at = at

    def __call__(self) -> datetime:
        return self.at

    def set(self, at: datetime) -> None:
        self.at = at

    def advance(self, by: timedelta) -> None:
        self.at += by


async def assert_invariants(database_url: str) -> None:
    """Fails with every broken invariant of the database at database_url (read in one
    snapshot, as `earmark audit` reads it); needs the `server` extra."""
    from earmark.store.audit import audit_database

    problems, _ = await audit_database(database_url)
    assert [] == problems, problems
