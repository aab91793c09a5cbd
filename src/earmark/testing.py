"""Test doubles for people who write workers, and for Earmark's own tests.

`FakeClock` is the clock a sidecar or store takes (`Sidecar(settings, clock=...)`): time
moves only when the test says, so a test of leases, expiry or periods waits for nothing.
`assert_invariants` checks a database the way `earmark audit` does: every budget and
period's used and held equal its ledger and its open holds, and the side tables agree.
`ModelSidecar` is a sidecar in the test's own process, on 127.0.0.1 port 0: Earmark's
Budget and Admin servicers over the store's model in memory (store/model.py), started in
milliseconds, without PostgreSQL.

They are test doubles: what they promise under concurrency comes from PostgreSQL, which a
test of races must run (as Earmark's own tests do). The model decides every call as the
sidecar does (the same validation and the same pure decisions, held equal to PostgreSQL's
by tests/store/test_contract.py), one call at a time; it keeps nothing past the test, and
Admin's listings, which are SQL, answer UNIMPLEMENTED on it. FakeClock needs only the SDK;
the rest needs the `server` extra."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any, cast

if TYPE_CHECKING:
    import grpc

    from earmark.store.model import Model


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


# Admin's methods that read pages of SQL (store/scans.py): the model has no such listings.
LISTINGS = (
    "ListPrices", "ListHolds", "ListLedger", "ListBudgets", "ListCalls", "GetSpend", "ListShares",
)  # fmt: skip


class ModelSidecar:
    """Earmark's Budget and Admin services on one port of 127.0.0.1, over a Model in this
    process: `async with ModelSidecar(clock) as sidecar:` then an SDK client on
    `sidecar.target` (Admin too: `AsyncClient(sidecar.target, admin_target=sidecar.target)`),
    or set budgets up on `sidecar.store` directly. A test double: one call is decided at a
    time, and nothing of PostgreSQL's concurrency is in it."""

    def __init__(
        self,
        clock: Callable[[], datetime] | None = None,
        *,
        lease_seconds_max: float | None = None,
    ) -> None:
        from earmark import limits
        from earmark.store.model import Model

        self.clock = clock or (lambda: datetime.now(UTC))
        self.store = Model.empty(self.clock)
        self.lease_seconds_max = lease_seconds_max or limits.lease_seconds_max_default
        self.port = 0
        self._server: grpc.aio.Server | None = None

    @property
    def target(self) -> str:
        """Where clients connect: 127.0.0.1 and the port the sidecar got."""
        assert self.port, "the sidecar has not started"
        return f"127.0.0.1:{self.port}"

    async def start(self) -> ModelSidecar:
        """Listens on a free port of 127.0.0.1 and serves until stop()."""
        import grpc

        from earmark.service.edge import EdgeInterceptor, StreamSlots
        from earmark.v1 import budget_pb2_grpc

        assert self._server is None, "the sidecar has started"
        budget, admin = _servicers(self.store, self.lease_seconds_max)
        edge = EdgeInterceptor(tokens=None, protected=(), streams=StreamSlots())
        server = grpc.aio.server(interceptors=[edge], options=[("grpc.so_reuseport", 0)])
        budget_pb2_grpc.add_BudgetServicer_to_server(budget, server)
        budget_pb2_grpc.add_AdminServicer_to_server(admin, server)
        self.port = server.add_insecure_port("127.0.0.1:0")
        await server.start()
        self._server = server
        return self

    async def stop(self) -> None:
        """Stops at once: calls still running are cancelled."""
        if self._server is not None:
            await self._server.stop(grace=None)
            self._server = None

    async def __aenter__(self) -> ModelSidecar:
        return await self.start()

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()


def _servicers(store: Model, lease_seconds_max: float) -> tuple[Any, Any]:
    """The Budget servicer, and Admin's with its listings answering UNIMPLEMENTED."""
    import grpc

    from earmark.metrics import Metrics
    from earmark.service.admin import AdminService
    from earmark.service.budget import BudgetService
    from earmark.service.drain import Drain
    from earmark.store.interface import AdminStore

    metrics, drain = Metrics(), Drain()

    def unimplemented(name: str) -> Callable[..., Any]:
        async def listing(
            self: Any, request: object, context: grpc.aio.ServicerContext[Any, Any]
        ) -> Any:
            await context.abort(
                grpc.StatusCode.UNIMPLEMENTED,
                f"{name}: the in-process sidecar on the model keeps no listings; "
                "run a sidecar on PostgreSQL",
            )

        return listing

    admin_type = type("ModelAdmin", (AdminService,), {n: unimplemented(n) for n in LISTINGS})
    budget = BudgetService(store, metrics, drain, lease_seconds_max=lease_seconds_max)
    # Admin's servicer takes the model as an AdminStore: only the listings, answered above,
    # would ask it for the scans it does not have.
    return budget, admin_type(cast("AdminStore", store), metrics, drain)
