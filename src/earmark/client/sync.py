"""Client: the worker SDK for synchronous code.

It runs an AsyncClient on an event loop in a background thread, so a hold's lease keeps
being renewed while the caller's thread is busy doing the expensive work.
"""

from __future__ import annotations

import asyncio
import copy
import threading
from collections.abc import Coroutine, Mapping, Sequence
from types import TracebackType
from typing import Any, TypeVar

import grpc

from earmark.client.aio import (
    AsyncClient,
    BudgetState,
    Charged,
    Reservation,
    RetryPolicy,
    Settled,
)
from earmark.client.errors import Refusal
from earmark.client.hold import Hold
from earmark.core.model import EstimatePolicy, Outcome
from earmark.core.prices import Shape, Usage

T = TypeVar("T")


class Client:
    """The synchronous twin of AsyncClient. Use as `with Client() as client:`."""

    def __init__(
        self,
        target: str | None = None,
        *,
        admin_target: str | None = None,
        token: str | None = None,
        admin_token: str | None = None,
        timeout_seconds: float = 5.0,
        retry: RetryPolicy | None = None,
        interceptors: Sequence[grpc.aio.ClientInterceptor] = (),
    ) -> None:
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(
            target=self._loop.run_forever, name="earmark-client", daemon=True
        )
        self._thread.start()

        async def make() -> AsyncClient:
            # A grpc.aio channel belongs to the loop it is made on.
            return AsyncClient(
                target,
                admin_target=admin_target,
                token=token,
                admin_token=admin_token,
                timeout_seconds=timeout_seconds,
                retry=retry,
                interceptors=interceptors,
            )

        self._client = self._run(make())
        self._view = False

    def _run(self, coroutine: Coroutine[Any, Any, T]) -> T:
        return asyncio.run_coroutine_threadsafe(coroutine, self._loop).result()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def options(
        self, *, timeout_seconds: float | None = None, metadata: Sequence[tuple[str, str]] = ()
    ) -> Client:
        """A view for some calls: another deadline, and metadata added to every call (see
        AsyncClient.options). It shares this client's loop and channels: close the client."""
        view = copy.copy(self)
        view._client = self._client.options(timeout_seconds=timeout_seconds, metadata=metadata)
        view._view = True
        return view

    def close(self) -> None:
        if self._view or self._loop.is_closed():
            return
        self._run(self._client.close())
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join()
        self._loop.close()

    def reserve(
        self,
        budget_id: str,
        amount: int = 0,
        *,
        shape: Shape | None = None,
        job: str = "",
        idempotency_key: str | None = None,
        lease_seconds: float | None = None,
        labels: Mapping[str, str] | None = None,
        also_budget_ids: Sequence[str] = (),
        final: bool = False,
    ) -> Reservation | Refusal:
        return self._run(
            self._client.reserve(
                budget_id,
                amount,
                shape=shape,
                job=job,
                idempotency_key=idempotency_key,
                lease_seconds=lease_seconds,
                labels=labels,
                also_budget_ids=also_budget_ids,
                final=final,
            )
        )

    def charge(
        self,
        reservation_id: str,
        amount: int = 0,
        *,
        usage: Usage | None = None,
        idempotency_key: str | None = None,
    ) -> Charged:
        return self._run(
            self._client.charge(
                reservation_id, amount, usage=usage, idempotency_key=idempotency_key
            )
        )

    def renew(self, reservation_id: str, lease_seconds: float | None = None) -> Any:
        return self._run(self._client.renew(reservation_id, lease_seconds))

    def settle(
        self,
        reservation_id: str,
        used: int = 0,
        outcome: Outcome = Outcome.SUCCEEDED,
        *,
        usage: Usage | None = None,
    ) -> Settled:
        return self._run(self._client.settle(reservation_id, used, outcome, usage=usage))

    def put_budget(
        self,
        budget_id: str,
        limit: int | None,
        unit: str = "",
        *,
        default_estimate: int | None = None,
        estimate_policy: EstimatePolicy = EstimatePolicy.MEDIAN,
    ) -> BudgetState:
        return self._run(
            self._client.put_budget(
                budget_id,
                limit,
                unit,
                default_estimate=default_estimate,
                estimate_policy=estimate_policy,
            )
        )

    def get_budget(self, budget_id: str) -> BudgetState:
        return self._run(self._client.get_budget(budget_id))

    def delete_budget(self, budget_id: str) -> BudgetState:
        return self._run(self._client.delete_budget(budget_id))

    def hold(
        self,
        budget_id: str,
        amount: int,
        *,
        lease_seconds: float | None = None,
        labels: Mapping[str, str] | None = None,
        raise_on_refusal: bool = True,
        account: str = "",
        shape: Shape | None = None,
        job: str = "",
        also_budget_ids: Sequence[str] = (),
    ) -> SyncHold:
        """As AsyncClient.hold, as a plain `with` block."""
        return SyncHold(
            self,
            self._client.hold(
                budget_id,
                amount,
                lease_seconds=lease_seconds,
                labels=labels,
                raise_on_refusal=raise_on_refusal,
                account=account,
                shape=shape,
                job=job,
                also_budget_ids=also_budget_ids,
            ),
        )


class SyncHold:
    """A Hold driven from a synchronous `with` block; its lease renews in the background."""

    def __init__(self, client: Client, hold: Hold) -> None:
        self._client = client
        self.hold = hold

    @property
    def admitted(self) -> bool:
        return self.hold.admitted

    @property
    def refusal(self) -> Refusal | None:
        return self.hold.refusal

    @property
    def lost(self) -> bool:
        return self.hold.lost

    @property
    def reservation_id(self) -> str:
        return self.hold.reservation_id

    @property
    def used(self) -> int | None:
        return self.hold.used

    @used.setter
    def used(self, value: int | None) -> None:
        self.hold.used = value

    @property
    def usage(self) -> Usage | None:
        return self.hold.usage

    @usage.setter
    def usage(self, value: Usage | None) -> None:
        self.hold.usage = value

    @property
    def settled(self) -> Settled | None:
        return self.hold.settled

    def charge(
        self, amount: int = 0, *, usage: Usage | None = None, idempotency_key: str | None = None
    ) -> Charged:
        return self._client._run(
            self.hold.charge(amount, usage=usage, idempotency_key=idempotency_key)
        )

    def __enter__(self) -> SyncHold:
        self._client._run(self.hold.__aenter__())
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._client._run(self.hold.__aexit__(exc_type, exc, tb))
