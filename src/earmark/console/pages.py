"""The console's pages and the JSON they poll: each handler makes the Admin calls its view
needs (one page of a listing each), and the actions each ask for a confirmation before
the one Admin call they make."""

from __future__ import annotations

import urllib.parse
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, RedirectResponse, Response
from starlette.templating import Jinja2Templates

from earmark import limits
from earmark.client import AsyncClient
from earmark.client.admin import HoldRecord, LedgerEntry
from earmark.console import present
from earmark.console.guard import Guard, Session
from earmark.console.labrun import LabBusy, LabRuns
from earmark.core.model import HoldState
from earmark.core.prices import Shape
from earmark.workloads.lab import LabParams

OPEN = (HoldState.HELD, HoldState.IN_DOUBT)


class BadInput(ValueError):
    """A form or query field a page cannot use: the message names it."""


def _int(raw: str | None, name: str, low: int, high: int, default: int | None = None) -> int:
    """A whole number from a field, within [low, high]; BadInput names the field."""
    text = (raw or "").strip().replace(",", "").replace("_", "")
    if not text:
        if default is None:
            raise BadInput(f"{name}: a whole number is required")
        return default
    if not text.lstrip("-").isdigit() or len(text) > 20:
        raise BadInput(f"{name}: {raw!r} is not a whole number")
    value = int(text)
    if not low <= value <= high:
        raise BadInput(f"{name}: {value:,} is not between {low:,} and {high:,}")
    return value


def _text(raw: str | None, name: str, most: int, required: bool = True) -> str:
    text = (raw or "").strip()
    if required and not text:
        raise BadInput(f"{name}: required")
    if len(text) > most:
        raise BadInput(f"{name}: longer than {most} characters")
    return text


@dataclass
class Pages:
    client: AsyncClient
    templates: Jinja2Templates
    lab: LabRuns
    guard: Guard
    clock: Callable[[], datetime]
    lab_step_seconds: float

    def render(self, request: Request, name: str, status: int = 200, **context: Any) -> Response:
        session: Session = request.state.session
        context.update(
            csrf=session.csrf,
            poll_ms=int(limits.console_poll_seconds * 1000),
            login=self.guard.login_token is not None,
        )
        return self.templates.TemplateResponse(request, name, context, status_code=status)

    def problem(self, request: Request, status: int, message: str) -> Response:
        wants_json = request.headers.get("accept", "").startswith("application/json")
        if request.url.path.startswith("/api/") or wants_json:
            return JSONResponse({"error": message}, status_code=status)
        return self.render(request, "error.html", status, message=message)

    # Budgets.

    async def budgets(self, request: Request) -> Response:
        return self.render(request, "budgets.html", **await self._budgets_page(request))

    async def budgets_json(self, request: Request) -> Response:
        return JSONResponse(await self._budgets_page(request))

    async def _budgets_page(self, request: Request) -> dict[str, Any]:
        q = _text(request.query_params.get("q"), "q", limits.console_search_length_max, False)
        token = _text(request.query_params.get("page"), "page", limits.page_token_length_max, False)
        page = await self.client.budgets_page(
            q, page_size=limits.console_page_rows_max, page_token=token
        )
        return {
            "q": q,
            "page": token,
            "budgets": [present.budget_view(state) for state in page.items],
            "next": page.next_page_token,
        }

    async def budget(self, request: Request) -> Response:
        return self.render(request, "budget.html", **await self._budget(request, ledger=True))

    async def budget_json(self, request: Request) -> Response:
        view = await self._budget(request, ledger=False)
        view.pop("ledger", None)
        return JSONResponse(view)

    async def _budget(self, request: Request, ledger: bool) -> dict[str, Any]:
        budget_id = _text(request.query_params.get("id"), "id", limits.budget_id_length_max)
        state = await self.client.get_budget(budget_id)
        unit, now = state.unit, self.clock()
        holds = await self._holds(budget_id)
        entries = await self._entries(budget_id, limits.console_chart_entries_max + 1)
        view: dict[str, Any] = {
            "budget": present.budget_view(state),
            "holds": [present.hold_view(h, unit, now) for h in holds if h.state in OPEN][
                : limits.console_page_rows_max
            ],
            "series": present.series(
                entries, state.limit, holds, limits.console_chart_entries_max
            ).to_json(),
        }
        view["parents"], view["children"] = present.nesting(budget_id, holds)
        if ledger:
            token = _text(
                request.query_params.get("ledger"), "ledger", limits.page_token_length_max, False
            )
            page = await self.client.ledger_page(
                budget_id, page_size=limits.console_page_rows_max, page_token=token
            )
            view["ledger"] = [present.ledger_view(e, unit) for e in page.items]
            view["ledger_next"] = page.next_page_token
            view["ledger_page"] = token
        return view

    async def _holds(self, budget_id: str) -> list[HoldRecord]:
        """The budget's holds, open ones first, at most limits.console_nesting_holds_max."""
        found: list[HoldRecord] = []
        for state in (*OPEN[::-1], None):
            token = ""
            while len(found) < limits.console_nesting_holds_max:
                page = await self.client.holds_page(
                    budget_id, state=state, page_size=limits.console_page_rows_max, page_token=token
                )
                # The last pass reads every state: the open ones are in already.
                found.extend(h for h in page.items if state is not None or h.state not in OPEN)
                token = page.next_page_token
                if not token:
                    break
        return found[: limits.console_nesting_holds_max]

    async def _entries(self, budget_id: str, most: int) -> list[LedgerEntry]:
        entries: list[LedgerEntry] = []
        token = ""
        while len(entries) < most:
            page = await self.client.ledger_page(
                budget_id, page_size=limits.page_size_max, page_token=token
            )
            entries.extend(page.items)
            token = page.next_page_token
            if not token:
                break
        return entries[:most]

    # Actions: each a confirmation page first, then one Admin call.

    async def action(self, request: Request) -> Response:
        form: dict[str, str] = request.state.form
        verb = request.path_params["verb"]
        budget_id = _text(form.get("budget"), "budget", limits.budget_id_length_max)
        back = "/budget?" + urllib.parse.urlencode({"id": budget_id})
        what = await self._describe(verb, form, budget_id)
        if form.get("confirm") != "yes":
            return self.render(request, "confirm.html", verb=verb, what=what, form=form, back=back)
        await self._act(verb, form, budget_id)
        return RedirectResponse(back, status_code=303)

    async def _describe(self, verb: str, form: dict[str, str], budget_id: str) -> str:
        """What the action will do, in the budget's unit, checked before it is confirmed."""
        state = await self.client.get_budget(budget_id)
        unit = state.unit
        if verb == "resolve":
            used = _int(form.get("used"), "used", 0, limits.amount_units_max)
            hold = _text(form.get("reservation_id"), "reservation_id", 64)
            return (
                f"Resolve hold {hold} at {present.amount(used, unit)} spent: the rest of "
                f"the hold returns to {budget_id} and every budget the hold names."
            )
        if verb == "release":
            hold = _text(form.get("reservation_id"), "reservation_id", 64)
            return (
                f"Release hold {hold}: it keeps what it charged and the rest returns "
                f"to {budget_id}."
            )
        if verb == "limit":
            limit = _int(form.get("limit"), "limit", 0, limits.limit_units_max)
            return (
                f"Change {budget_id}'s limit from {present.amount(state.limit, unit)} to "
                f"{present.amount(limit, unit)} {present.unit_name(unit)}."
            )
        if verb == "archive":
            return f"Archive {budget_id}: it takes no Reserves any more; its ledger stays."
        raise BadInput(f"action: {verb!r} is not resolve, release, limit or archive")

    async def _act(self, verb: str, form: dict[str, str], budget_id: str) -> None:
        if verb == "resolve":
            used = _int(form.get("used"), "used", 0, limits.amount_units_max)
            await self.client.resolve_hold(form["reservation_id"].strip(), used)
        elif verb == "release":
            await self.client.release_hold(form["reservation_id"].strip())
        elif verb == "limit":
            limit = _int(form.get("limit"), "limit", 0, limits.limit_units_max)
            state = await self.client.get_budget(budget_id)
            # PutBudget sets every field: the others are sent as they are.
            await self.client.put_budget(
                budget_id,
                limit,
                state.unit,
                default_estimate=state.default_estimate,
                estimate_policy=state.estimate_policy,
                escrow_bps=state.escrow_bps,
                overage_policy=state.overage_policy,
                overage_limit=state.overage_limit,
            )
        elif verb == "archive":
            await self.client.delete_budget(budget_id)

    # Prices.

    async def prices(self, request: Request) -> Response:
        prices = await self.client.list_prices()
        params = request.query_params
        cost: dict[str, Any] | None = None
        if params.get("model"):
            shape = Shape(
                provider=_text(params.get("provider"), "provider", 64),
                model=_text(params.get("model"), "model", 128),
                input_tokens=_int(
                    params.get("input"), "input", 0, limits.tokens_per_request_max, 0
                ),
                max_output_tokens=_int(
                    params.get("output"), "output", 0, limits.tokens_per_request_max, 0
                ),
                cached_input_tokens=0,
            )
            priced = present.cost_now(prices, shape, self.clock())
            cost = {
                "shape": shape,
                "cost": present.amount(priced[1], "usd_micros") if priced else None,
                "version": priced[0].version if priced else None,
            }
        return self.render(
            request, "prices.html", models=present.models(prices), cost=cost, query=params
        )

    # The Lab.

    async def lab_page(self, request: Request) -> Response:
        return self.render(
            request, "lab.html", defaults=LabParams(), run_id=request.query_params.get("run", "")
        )

    async def lab_start(self, request: Request) -> Response:
        form: dict[str, str] = request.state.form
        most = limits.console_lab_amount_max
        try:
            params = LabParams(
                jobs=_int(form.get("jobs"), "jobs", 1, limits.console_lab_jobs_max, 5),
                estimate=_int(form.get("estimate"), "estimate", 1, most, 40_000),
                limit=_int(form.get("limit"), "plan", 0, most, 100_000),
                actual=_int(form.get("actual"), "actual", 0, most, 0),
                concurrency=_int(
                    form.get("concurrency"), "concurrency", 0, limits.console_lab_jobs_max, 0
                ),
                step_seconds=self.lab_step_seconds,
            )
            run = self.lab.start(params)
        except LabBusy as busy:
            return self.problem(request, 409, str(busy))
        if form.get("respond") == "json":
            return JSONResponse({"run_id": run.run_id}, status_code=202)
        return RedirectResponse(f"/lab?run={run.run_id}", status_code=303)

    async def lab_json(self, request: Request) -> Response:
        run = self.lab.get(request.path_params["run_id"])
        if run is None:
            return self.problem(request, 404, "no such Lab run (the last few are kept)")
        return JSONResponse(run.to_json())

    # Login.

    async def login_page(self, request: Request) -> Response:
        return self.render(request, "login.html", next=_next(request.query_params.get("next")))

    async def login(self, request: Request) -> Response:
        form: dict[str, str] = request.state.form
        session: Session = request.state.session
        target = _next(form.get("next"))
        if not self.guard.logged_in(session, form.get("token", "")):
            return self.render(
                request, "login.html", 401, next=target, message="That token is not the one."
            )
        return RedirectResponse(target, status_code=303)

    async def logout(self, request: Request) -> Response:
        session: Session = request.state.session
        self.guard.sessions.end(session.sid)
        return RedirectResponse("/login", status_code=303)


def _next(raw: str | None) -> str:
    """Where to go after logging in: a path of this console, never another site."""
    target = (raw or "/").strip()
    if not target.startswith("/") or target.startswith("//") or "\\" in target:
        return "/"
    return target
