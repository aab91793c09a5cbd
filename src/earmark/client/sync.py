"""Client: the worker SDK for synchronous code, derived from AsyncClient.

Each Client owns a private event loop on a thread of its own, where its AsyncClient (and
that client's grpc.aio channels) live; each call runs the AsyncClient's coroutine there and
waits for its answer. The loop keeps running between calls, so a hold's lease is renewed
while the caller's thread does the expensive work. The loop stops and closes with the Client.

The calls are not written twice. Each coroutine method of AsyncClient (and of Hold) becomes
a method here through blocking(): the same parameters, defaults, annotations and docstring,
and mypy sees the same types (through ParamSpec), so a parameter added to AsyncClient is on
Client at once. What cannot be derived that way (the constructor, options(), hold(), the
context managers) is written by hand, and tests/client/test_one_sdk.py compares every public
signature of the two faces.
"""

from __future__ import annotations

import asyncio
import copy
import functools
import inspect
import threading
from collections.abc import (
    AsyncGenerator,
    AsyncIterator,
    Callable,
    Coroutine,
    Iterator,
    Mapping,
    Sequence,
)
from pathlib import Path
from types import TracebackType
from typing import Any, Concatenate, Generic, ParamSpec, TypeVar, overload

import grpc

from earmark.client.aio import AsyncClient
from earmark.client.hold import Hold, HoldInput
from earmark.client.types import (
    Refusal,
    Reservation,
    RetryPolicy,
    Settled,
    check_timeout,
)
from earmark.core.model import Outcome
from earmark.core.prices import Shape, Usage

T = TypeVar("T")
P = ParamSpec("P")
# Covariant: a Client (the twin of an AsyncClient) is the twin of each mixin AsyncClient
# is made of (AdminCalls...), so the methods blocking() takes from a mixin fit it.
A = TypeVar("A", covariant=True)


class _Twin(Generic[A]):
    """The synchronous face of an async object A whose coroutines run on a Client's loop."""

    _async: A

    def _run(self, coroutine: Coroutine[Any, Any, T]) -> T:
        raise NotImplementedError


def blocking(
    method: Callable[Concatenate[A, P], Coroutine[Any, Any, T]],
) -> Callable[Concatenate[_Twin[A], P], T]:
    """The synchronous twin of an async method: it runs the method on the twin's async
    object, on its Client's loop, and returns the result (or raises its exception)."""

    @functools.wraps(method)
    def call(self: _Twin[A], /, *args: P.args, **kwargs: P.kwargs) -> T:
        return self._run(method(self._async, *args, **kwargs))

    return call


def iterating(
    method: Callable[Concatenate[A, P], AsyncIterator[T]],
) -> Callable[Concatenate[_Twin[A], P], Iterator[T]]:
    """The synchronous twin of an async listing: a plain iterator whose each step runs the
    listing's next step on the twin's Client's loop (so a page is fetched when the last
    one is read), closed with it."""

    @functools.wraps(method)
    def call(self: _Twin[A], /, *args: P.args, **kwargs: P.kwargs) -> Iterator[T]:
        listing = method(self._async, *args, **kwargs)

        async def step() -> tuple[T] | None:
            try:
                return (await anext(listing),)
            except StopAsyncIteration:
                return None

        def items() -> Iterator[T]:
            try:
                while (item := self._run(step())) is not None:
                    yield item[0]
            finally:
                # Read to the end or left early (a break), the listing's generator is
                # closed on the loop it runs on rather than left to the collector.
                if isinstance(listing, AsyncGenerator):
                    self._run(listing.aclose())

        return items()

    # What help() and the signature test show: an Iterator, not the AsyncIterator wrapped.
    signature = inspect.signature(method)
    returned = str(signature.return_annotation).replace("AsyncIterator", "Iterator")
    call.__signature__ = signature.replace(return_annotation=returned)  # type: ignore[attr-defined]
    return call


class Client(_Twin[AsyncClient]):
    """The synchronous twin of AsyncClient. Use as `with Client() as client:`.

    It takes AsyncClient's arguments but channel: a grpc.aio channel belongs to the event
    loop it was made on, and a Client's loop is its own."""

    def __init__(
        self,
        target: str | None = None,
        *,
        admin_target: str | None = None,
        token: str | None = None,
        admin_token: str | None = None,
        credentials: grpc.ChannelCredentials | None = None,
        timeout_seconds: float = 5.0,
        retry: RetryPolicy | None = None,
        interceptors: Sequence[grpc.aio.ClientInterceptor] = (),
        journal_dir: str | Path | None = None,
    ) -> None:
        # Checked here too, so that a mistake starts no thread.
        check_timeout(timeout_seconds)
        self._view = False
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(
            target=self._loop.run_forever, name="earmark-client", daemon=True
        )
        self._thread.start()

        async def make() -> AsyncClient:
            # A grpc.aio channel belongs to the loop it is made on: this Client's.
            return AsyncClient(
                target,
                admin_target=admin_target,
                token=token,
                admin_token=admin_token,
                credentials=credentials,
                timeout_seconds=timeout_seconds,
                retry=retry,
                interceptors=interceptors,
                journal_dir=journal_dir,
            )

        try:
            self._async = self._run(make())
            # What a client that died left in the journal is sent before any new call.
            self._run(self._async.recover())
        except BaseException:
            self._stop()
            raise

    @property
    def target(self) -> str:
        return self._async.target

    @property
    def admin_target(self) -> str:
        return self._async.admin_target

    @property
    def timeout_seconds(self) -> float:
        return self._async.timeout_seconds

    @property
    def retry(self) -> RetryPolicy:
        return self._async.retry

    def _run(self, coroutine: Coroutine[Any, Any, T]) -> T:
        """Runs coroutine on the Client's loop and waits for it."""
        if threading.current_thread() is self._thread or self._loop.is_closed():
            coroutine.close()
            raise RuntimeError(
                "this Client is closed"
                if self._loop.is_closed()
                else "a Client's calls cannot be made on its own loop: use AsyncClient there"
            )
        return asyncio.run_coroutine_threadsafe(coroutine, self._loop).result()

    def _stop(self) -> None:
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join()
        self._loop.close()

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
        view._async = self._async.options(timeout_seconds=timeout_seconds, metadata=metadata)
        view._view = True
        return view

    def close(self) -> None:
        """Closes the channels, then stops and closes the loop (a view's close does
        nothing: close its client)."""
        if self._view or self._loop.is_closed():
            return
        try:
            self._run(self._async.close())
        finally:
            self._stop()

    reserve = blocking(AsyncClient.reserve)
    charge = blocking(AsyncClient.charge)
    renew = blocking(AsyncClient.renew)
    settle = blocking(AsyncClient.settle)
    put_budget = blocking(AsyncClient.put_budget)
    update_budget = blocking(AsyncClient.update_budget)
    get_budget = blocking(AsyncClient.get_budget)
    delete_budget = blocking(AsyncClient.delete_budget)
    put_template = blocking(AsyncClient.put_template)
    list_templates = blocking(AsyncClient.list_templates)
    delete_template = blocking(AsyncClient.delete_template)
    put_price = blocking(AsyncClient.put_price)
    list_prices = blocking(AsyncClient.list_prices)
    list_cycles = blocking(AsyncClient.list_cycles)
    refresh_limits = blocking(AsyncClient.refresh_limits)
    list_holds = iterating(AsyncClient.list_holds)
    list_ledger = iterating(AsyncClient.list_ledger)
    list_budgets = iterating(AsyncClient.list_budgets)
    budgets_page = blocking(AsyncClient.budgets_page)
    holds_page = blocking(AsyncClient.holds_page)
    ledger_page = blocking(AsyncClient.ledger_page)
    resolve_hold = blocking(AsyncClient.resolve_hold)
    release_hold = blocking(AsyncClient.release_hold)
    get_spend = blocking(AsyncClient.get_spend)
    flush = blocking(AsyncClient.flush)
    recover = blocking(AsyncClient.recover)

    def _submit(self, coroutine: Coroutine[Any, Any, Any]) -> None:
        """Starts coroutine on the client's loop without waiting for it."""
        asyncio.run_coroutine_threadsafe(coroutine, self._loop)

    def _submit_later(self, settling: Coroutine[Any, Any, Any]) -> None:
        """Runs a metered call's settling on the client's loop without the caller waiting:
        among the settles flush() and close() wait for, started
        limits.client_sync_settle_start_seconds later (AsyncClient._in_background_later).
        Raises RuntimeError, settling not started, when the client is closed."""
        starting = _background_later(self._async, settling)
        try:
            self._submit(starting)
        except BaseException:
            starting.close()
            raise

    def hold(
        self,
        budget_id: str,
        amount: int = 0,
        *,
        lease_seconds: float | None = None,
        labels: Mapping[str, str] | None = None,
        raise_on_refusal: bool = True,
        account: str = "",
        feature: str = "",
        shape: Shape | None = None,
        job: str = "",
        also_budget_ids: Sequence[str] = (),
        final: bool = False,
        charge: Usage | None = None,
        degrade: bool = False,
    ) -> SyncHold:
        """As AsyncClient.hold, as a plain `with` block."""
        what = HoldInput(
            budget_id,
            amount,
            shape=shape,
            charge=charge,
            job=job,
            also_budget_ids=also_budget_ids,
            labels=labels or {},
            lease_seconds=lease_seconds,
            account=account,
            feature=feature,
            degrade=degrade,
            final=final,
            raise_on_refusal=raise_on_refusal,
        )
        return SyncHold(self, Hold(self._async, what))


class _Mirror(Generic[T]):
    """An attribute of the async Hold, read and written through the SyncHold."""

    def __set_name__(self, owner: type[Any], name: str) -> None:
        self._name = name

    @overload
    def __get__(self, holder: None, owner: type[Any]) -> _Mirror[T]: ...

    @overload
    def __get__(self, holder: SyncHold, owner: type[Any]) -> T: ...

    def __get__(self, holder: SyncHold | None, owner: type[Any]) -> _Mirror[T] | T:
        if holder is None:
            return self
        value: T = getattr(holder.hold, self._name)
        return value

    def __set__(self, holder: SyncHold, value: T) -> None:
        setattr(holder.hold, self._name, value)


class SyncHold(_Twin[Hold]):
    """A Hold driven from a synchronous `with` block; its lease renews in the background.
    It has the Hold's attributes (client is the synchronous Client)."""

    def __init__(self, client: Client, hold: Hold) -> None:
        self.client = client
        self.hold = hold
        self._async = hold

    def _run(self, coroutine: Coroutine[Any, Any, T]) -> T:
        return self.client._run(coroutine)

    account: _Mirror[str] = _Mirror()
    feature: _Mirror[str] = _Mirror()
    final: _Mirror[bool] = _Mirror()
    budget_id: _Mirror[str] = _Mirror()
    amount: _Mirror[int] = _Mirror()
    shape: _Mirror[Shape | None] = _Mirror()
    job: _Mirror[str] = _Mirror()
    also_budget_ids: _Mirror[tuple[str, ...]] = _Mirror()
    lease_seconds: _Mirror[float | None] = _Mirror()
    labels: _Mirror[dict[str, str]] = _Mirror()
    raise_on_refusal: _Mirror[bool] = _Mirror()
    idempotency_key: _Mirror[str] = _Mirror()
    prompt: _Mirror[Usage | None] = _Mirror()
    degrade: _Mirror[bool] = _Mirror()
    used: _Mirror[int | None] = _Mirror()
    usage: _Mirror[Usage | None] = _Mirror()
    outcome: _Mirror[Outcome | None] = _Mirror()
    charged: _Mirror[int] = _Mirror()
    reservation: _Mirror[Reservation | None] = _Mirror()
    refusal: _Mirror[Refusal | None] = _Mirror()
    settled: _Mirror[Settled | None] = _Mirror()
    admitted: _Mirror[bool] = _Mirror()
    lost: _Mirror[bool] = _Mirror()
    reservation_id: _Mirror[str] = _Mirror()

    charge = blocking(Hold.charge)
    label = blocking(Hold.label)
    end = blocking(Hold.end)
    end_in_doubt = blocking(Hold.end_in_doubt)

    def open(self) -> SyncHold:
        """As Hold.open: reserves, and renews on the Client's loop until the hold ends."""
        self._run(self.hold.open())
        return self

    def __enter__(self) -> SyncHold:
        return self.open()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._run(self.hold.__aexit__(exc_type, exc, tb))


async def _background_later(earmark: AsyncClient, settling: Coroutine[Any, Any, Any]) -> None:
    earmark._in_background_later(settling)
