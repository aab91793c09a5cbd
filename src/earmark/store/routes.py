"""Where a Charge, Renew or Settle goes: the budgets its reservation holds on (its route),
looked up once and then kept, since a reservation never changes budgets."""

from __future__ import annotations

from collections import OrderedDict

from earmark import limits
from earmark.errors import reservation_not_found
from earmark.store.lanes import Route
from earmark.store.tx import Conn


async def route_of(conn: Conn, reservation_id: str) -> Route:
    """The reservation's budget, then those it also holds on."""
    row = await conn.fetchrow(
        "SELECT budget_id, also_budget_ids FROM reservations WHERE reservation_id = $1",
        reservation_id,
    )
    if row is None:
        raise reservation_not_found(reservation_id)
    return (row["budget_id"], *row["also_budget_ids"])


class RouteCache:
    """Routes of live holds, at most limits.route_cache_size_max, the oldest dropped
    first; a settled hold's route is forgotten (a late retry looks it up again)."""

    def __init__(self) -> None:
        self._routes: OrderedDict[str, Route] = OrderedDict()

    def get(self, reservation_id: str) -> Route | None:
        return self._routes.get(reservation_id)

    def remember(self, reservation_id: str, route: Route) -> None:
        self._routes[reservation_id] = route
        if len(self._routes) > limits.route_cache_size_max:
            self._routes.popitem(last=False)

    def forget(self, reservation_id: str) -> None:
        self._routes.pop(reservation_id, None)
