"""A hold driven by name (open, end, end_in_doubt) rather than by an `async with` block,
as a metered call and the LiteLLM gate drive theirs, and the held-call sequence they share."""

from __future__ import annotations

import ast
import inspect

import pytest

from earmark.client import AsyncClient, HoldState, Outcome, RefusedError, wire_transport
from earmark.client.held_call import HeldCall
from tests.conftest import Running


async def test_a_hold_opens_once_and_ends_once(sidecar: Running) -> None:
    """open() reserves (a refusal raised, or kept when asked), end() settles at what it is
    given, end_in_doubt() leaves the hold in doubt with its charge; a second end does
    nothing, and a second open is refused (a retry takes a new hold)."""
    async with AsyncClient(sidecar.target, admin_target=sidecar.admin_target) as client:
        await client.put_budget("acme/held", 10_000, "tokens")
        hold = await client.hold("acme/held", 4_000).open()
        await hold.charge(1_000)
        settled = await hold.end(used=2_500, outcome=Outcome.SUCCEEDED)
        assert settled is not None
        assert (2_500, HoldState.SETTLED, None, 2_500) == (
            settled.charged,
            settled.state,
            await hold.end(used=4_000),
            hold.used,
        )
        with pytest.raises(RuntimeError, match="opened already"):
            await hold.open()

        doubted = await client.hold("acme/held", 3_000).open()
        await doubted.charge(700)
        in_doubt = await doubted.end_in_doubt()
        assert in_doubt is not None
        assert (700, HoldState.IN_DOUBT) == (in_doubt.charged, in_doubt.state)

        refused = await client.hold("acme/held", 50_000, raise_on_refusal=False).open()
        assert (False, None) == (refused.admitted, await refused.end(used=1))
        with pytest.raises(RefusedError):
            await client.hold("acme/held", 50_000).open()


def _calls_in(cls: type) -> set[str]:
    """The names of the methods cls's source calls on anything."""
    tree = ast.parse(inspect.getsource(cls).lstrip())
    return {
        node.func.attr
        for node in ast.walk(tree)
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
    }


def test_the_transports_have_no_step_of_their_own() -> None:
    """Neither httpx2 transport calls a step of the held call or of its hold: both drive
    the one exchange (the sync one runs its hold steps on the Client's loop)."""
    steps = {n for n in vars(HeldCall) if not n.startswith("__")}
    steps |= {"open", "end", "end_in_doubt", "__aenter__", "__aexit__", "charge", "settle"}
    for transport in (wire_transport.AsyncMeteredTransport, wire_transport.MeteredTransport):
        assert set() == _calls_in(transport) & steps, transport.__name__
