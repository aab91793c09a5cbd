"""The console's pages and the JSON they poll: each handler makes the Admin calls its view
needs, a bounded number each, and the actions ask for a confirmation before their one
Admin call (actions.py)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, RedirectResponse, Response
from starlette.templating import Jinja2Templates

from earmark import limits
from earmark.client import AsyncClient
from earmark.console import actions, fields, present, spend
from earmark.console.guard import Guard, Session
from earmark.console.labrun import LabBusy, LabRuns
from earmark.console.throttle import Throttled
from earmark.core.model import OPEN_STATES, HoldState
from earmark.core.prices import Shape
from earmark.workloads.lab import LabParams

# The states the holds page lists across every budget, by their name in its query.
ACROSS_STATES = {"in-doubt": HoldState.IN_DOUBT, "held": HoldState.HELD}
# The states it lists one budget's holds in ("all": every state; "expired" includes the
# holds an operator released, which ListHolds lists as expired and marks released).
BUDGET_STATES: dict[str, HoldState | None] = {
    "all": None,
    "held": HoldState.HELD,
    "in-doubt": HoldState.IN_DOUBT,
    "settled": HoldState.SETTLED,
    "expired": HoldState.EXPIRED,
}


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
            lab_poll_ms=int(limits.console_lab_poll_seconds * 1000),
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
        query = request.query_params
        q = fields.text(query.get("q"), "q", limits.console_search_length_max, False)
        token = fields.text(query.get("page"), "page", limits.page_token_length_max, False)
        page = await self.client.budgets_page(
            q, page_size=limits.console_page_rows_max, page_token=token
        )
        return {
            "q": q,
            "page": token,
            "budgets": [present.budget_view(state, self.clock()) for state in page.items],
            "next": page.next_page_token,
        }

    def _budget_id(self, request: Request) -> str:
        return fields.text(request.query_params.get("id"), "id", limits.budget_id_length_max)

    async def budget(self, request: Request) -> Response:
        """A budget's page: its numbers, open holds, nesting, chart and a page of ledger."""
        budget_id = self._budget_id(request)
        state = await self.client.get_budget(budget_id)
        unit, now = state.unit, self.clock()
        holds = [
            h
            async for h in present.at_most(
                self.client.list_holds(budget_id, page_size=limits.page_size_max),
                limits.console_nesting_holds_max,
            )
        ]
        entries = [
            e
            async for e in present.at_most(
                self.client.list_ledger(budget_id, page_size=limits.page_size_max),
                limits.console_chart_entries_max + 1,
            )
        ]
        token = fields.text(
            request.query_params.get("ledger"), "ledger", limits.page_token_length_max, False
        )
        ledger = await self.client.ledger_page(
            budget_id, page_size=limits.console_page_rows_max, page_token=token
        )
        parents, children = present.nesting(budget_id, holds)
        open_holds = [h for h in holds if h.state in OPEN_STATES]
        open_holds.sort(key=lambda h: (h.state != HoldState.IN_DOUBT, h.created_at))
        drawn = present.series(entries, state.limit, holds, limits.console_chart_entries_max, unit)
        return self.render(
            request,
            "budget.html",
            budget=present.budget_view(state, now),
            holds=[present.hold_view(h, unit, now) for h in open_holds],
            series=drawn.to_json(),
            overshoot=present.amount(drawn.overshoot, unit),
            parents=parents,
            children=children,
            ledger=[present.ledger_view(e, unit) for e in ledger.items],
            ledger_next=ledger.next_page_token,
            ledger_page=token,
        )

    async def budget_json(self, request: Request) -> Response:
        """What a budget's page polls: its numbers (one GetBudget), and the moment they are
        of, which the chart adds as a point."""
        state = await self.client.get_budget(self._budget_id(request))
        now = self.clock()
        view = present.budget_view(state, now)
        view["at"] = now.timestamp()
        view["used_raw"], view["held_raw"], view["limit_raw"] = state.used, state.held, state.limit
        return JSONResponse(view)

    # Budget templates (issue 47): read-only here; `earmark templates` puts and deletes them.

    async def budget_templates(self, request: Request) -> Response:
        """Every budget template: one ListBudgetTemplates."""
        found = await self.client.list_templates()
        return self.render(
            request, "templates.html", templates=[present.template_view(t) for t in found]
        )

    # Holds across budgets.

    async def holds(self, request: Request) -> Response:
        """A page of every budget's holds in one open state (in doubt unless ?state=held),
        oldest first: one ListHolds, and one GetBudget for each budget on the page (for its
        unit). With ?budget=, a page of that budget's holds instead (budget_holds)."""
        query = request.query_params
        budget_id = fields.text(query.get("budget"), "budget", limits.budget_id_length_max, False)
        if budget_id:
            return await self.budget_holds(request, budget_id)
        longest = max(len(name) for name in ACROSS_STATES)
        name = fields.text(query.get("state"), "state", longest, False) or "in-doubt"
        if name not in ACROSS_STATES:
            raise fields.BadInput(f"state: {name!r} is not one of in-doubt, held")
        token = fields.text(query.get("page"), "page", limits.page_token_length_max, False)
        page = await self.client.holds_page(
            state=ACROSS_STATES[name], page_size=limits.console_page_rows_max, page_token=token
        )
        units: dict[str, str] = {}
        for hold in page.items:
            if hold.budget_id not in units:
                units[hold.budget_id] = (await self.client.get_budget(hold.budget_id)).unit
        now = self.clock()
        return self.render(
            request,
            "holds.html",
            state=name,
            holds=[present.hold_view(h, units[h.budget_id], now) for h in page.items],
            page=token,
            next=page.next_page_token,
        )

    async def budget_holds(self, request: Request, budget_id: str) -> Response:
        """A page of one budget's holds (its own and those nested under it) in every state
        or one, in ListHolds' order: one GetBudget (for its unit) and one ListHolds."""
        query = request.query_params
        longest = max(len(name) for name in BUDGET_STATES)
        name = fields.text(query.get("state"), "state", longest, False) or "all"
        if name not in BUDGET_STATES:
            raise fields.BadInput(f"state: {name!r} is not one of {', '.join(BUDGET_STATES)}")
        token = fields.text(query.get("page"), "page", limits.page_token_length_max, False)
        state = await self.client.get_budget(budget_id)
        page = await self.client.holds_page(
            budget_id,
            state=BUDGET_STATES[name],
            page_size=limits.console_page_rows_max,
            page_token=token,
        )
        now = self.clock()
        return self.render(
            request,
            "budget_holds.html",
            budget=present.budget_view(state, now),
            state=name,
            states=list(BUDGET_STATES),
            holds=[present.hold_view(h, state.unit, now) for h in page.items],
            page=token,
            next=page.next_page_token,
        )

    # Spend.

    async def spend(self, request: Request) -> Response:
        """A budget's spend from its ledger by model, job or UTC day: one GetSpend."""
        ask = spend.ask_of(request.query_params)
        since, until = ask.window()
        found = await self.client.get_spend(
            ask.budget_id,
            ask.group,
            since=since,
            until=until,
            max_rows=limits.console_page_rows_max,
        )
        return self.render(request, "spend.html", spend=spend.spend_view(ask, found))

    # Actions: each a confirmation page first, then one Admin call.

    async def action(self, request: Request) -> Response:
        form: dict[str, str] = request.state.form
        action = actions.action_of(request.path_params["verb"], form)
        state = await self.client.get_budget(action.budget_id)
        action = action.in_unit(state.unit)
        if action.reservation_id:
            await actions.in_doubt_on(self.client, action)
        back = action.back_path()
        if form.get("confirm") != "yes":
            what = actions.described(action, state)
            return self.render(
                request, "confirm.html", verb=action.verb, what=what, form=form, back=back
            )
        await actions.act(self.client, action, state)
        return RedirectResponse(back, status_code=303)

    # Prices.

    async def prices(self, request: Request) -> Response:
        prices = await self.client.list_prices()
        query = request.query_params
        cost: dict[str, Any] | None = None
        if query.get("model"):
            most = limits.tokens_per_request_max
            shape = Shape(
                provider=fields.text(query.get("provider"), "provider", limits.provider_length_max),
                model=fields.text(query.get("model"), "model", limits.model_length_max),
                input_tokens=fields.whole(query.get("input"), "input", 0, most, 0),
                max_output_tokens=fields.whole(query.get("output"), "output", 0, most, 0),
            )
            priced = present.cost_now(prices, shape, self.clock())
            cost = {
                "shape": shape,
                "cost": present.amount(priced[1], "usd_micros") if priced else None,
                "version": priced[0].version if priced else None,
            }
        return self.render(
            request, "prices.html", models=present.models(prices), cost=cost, query=query
        )

    # The Lab.

    async def lab_page(self, request: Request) -> Response:
        run = fields.text(request.query_params.get("run"), "run", 64, False)
        return self.render(request, "lab.html", defaults=LabParams(), run_id=run)

    async def lab_start(self, request: Request) -> Response:
        form: dict[str, str] = request.state.form
        most, jobs_max = limits.console_lab_amount_max, limits.console_lab_jobs_max
        try:
            params = LabParams(
                jobs=fields.whole(form.get("jobs"), "jobs", 1, jobs_max, 5),
                estimate=fields.whole(form.get("estimate"), "estimate", 1, most, 40_000),
                limit=fields.whole(form.get("limit"), "plan", 0, most, 100_000),
                actual=fields.whole(form.get("actual"), "actual", 0, most, 0),
                concurrency=fields.whole(form.get("concurrency"), "concurrency", 0, jobs_max, 0),
                step_seconds=self.lab_step_seconds,
            )
        except ValueError as error:
            raise fields.BadInput(str(error)) from None
        try:
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
        target = _next(form.get("next"))
        # The throttle keys on the address of the connection's peer. The console reads no
        # X-Forwarded-For (serving turns uvicorn's reading of it off), so a client cannot
        # claim another address, and behind a proxy every client has the proxy's.
        address = request.client.host if request.client is not None else ""
        try:
            session = self.guard.log_in(form.get("token", ""), address)
        except Throttled as throttled:
            wait = throttled.retry_after_seconds
            answer = self.render(
                request,
                "login.html",
                429,
                next=target,
                message=f"Too many wrong tokens: logging in is paused for {wait} s.",
            )
            answer.headers["retry-after"] = str(wait)
            return answer
        if session is None:
            return self.render(
                request, "login.html", 401, next=target, message="That token is not the one."
            )
        answer = RedirectResponse(target, status_code=303)
        answer.headers["set-cookie"] = self.guard.cookie(session)
        return answer

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
