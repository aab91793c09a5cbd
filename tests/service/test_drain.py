"""The drain's rules: while draining, only calls on holds admitted here get in, and the
holds it remembers are bounded, oldest forgotten first."""

from __future__ import annotations

import pytest

from earmark import limits
from earmark.errors import Unavailable
from earmark.service.drain import Drain


def test_draining_admits_only_the_calls_of_open_holds() -> None:
    """After SIGTERM a tracked hold's call enters; a settled one's, or a new Reserve, is
    UNAVAILABLE."""
    drain = Drain()
    drain.track("open")
    drain.track("settled")
    drain.untrack("settled")
    drain.draining = True
    drain.enter("open")
    refused = []
    for reservation_id in ("settled", ""):
        with pytest.raises(Unavailable):
            drain.enter(reservation_id)
        refused.append(reservation_id)
    assert (1, ["settled", ""]) == (drain.active, refused)


def test_tracked_holds_are_bounded_oldest_first(monkeypatch: pytest.MonkeyPatch) -> None:
    """Past the bound the oldest hold is forgotten, so holds whose workers died cannot
    crowd out new ones."""
    monkeypatch.setattr(limits, "drain_tracked_holds_max", 2)
    drain = Drain()
    for reservation_id in ("a", "b", "c"):
        drain.track(reservation_id)
    assert ["b", "c"] == list(drain.holds)
