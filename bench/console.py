"""Scenario 13, the console: `earmark console` (a process of its own, as an operator runs
it) in front of the grouped sidecar with 10,000 budgets, and how fast its budgets pages
answer: the first page, a page deep in the list (by its next-page token), a search by id
prefix, and the JSON a page polls, 5 people's browsers at once."""

from __future__ import annotations

import asyncio
import re
import sys
import time

import httpx

from bench.harness import Figure, Loop, closed_loop
from bench.scenarios import Env, check_invariants, figures, stubs
from earmark.v1 import budget_pb2 as pb
from tests.helpers import free_port

BUDGETS = 10_000
FILL_IN_FLIGHT = 50
READERS = 5
NEXT = re.compile(r'href="/budgets\?q=[^"&]*&amp;page=([^"]+)" rel="next"')
LABEL = f"console ({BUDGETS:,} budgets)"
# What each reader asks for, in turn: kind and path.
PAGES = ("first page", "deep page", "search", "poll")


async def fill(env: Env) -> None:
    """BUDGETS budgets, console/org{i % 100}/team{i}, on the grouped sidecar."""
    s = stubs(env.grouped)
    try:
        ids = iter(range(BUDGETS))

        async def worker() -> None:
            for i in ids:
                request = pb.PutBudgetRequest(
                    budget_id=f"console/org{i % 100:03d}/team{i:05d}", limit=10**6, unit="t"
                )
                await s.admin.PutBudget(request, timeout=30)

        await asyncio.gather(*(worker() for _ in range(FILL_IN_FLIGHT)))
    finally:
        await s.close()


async def started(url: str, process: asyncio.subprocess.Process) -> None:
    """Waits (with a deadline) until the console answers /healthz."""
    deadline = time.monotonic() + 30
    async with httpx.AsyncClient(base_url=url) as http:
        while time.monotonic() < deadline:
            if process.returncode is not None:
                raise RuntimeError(f"earmark console exited {process.returncode}")
            try:
                if (await http.get("/healthz")).status_code == 200:
                    return
            except httpx.TransportError:
                pass
            await asyncio.sleep(0.1)
    raise RuntimeError("earmark console did not answer within 30 s")


async def console(env: Env) -> list[Figure]:
    await fill(env)
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "earmark", "console", "--listen", f"127.0.0.1:{port}",
        "--target", env.grouped.target, "--admin-target", env.grouped.admin,
        "--log-level", "warning",
        stdout=asyncio.subprocess.DEVNULL,
    )  # fmt: skip
    out = figures(
        *((f"{LABEL}: {kind} p50", "ms") for kind in PAGES),
        *((f"{LABEL}: {kind} p99", "ms") for kind in PAGES),
        (f"{LABEL}: pages/s", "pages/s"),
    )
    try:
        await started(url, process)
        async with httpx.AsyncClient(base_url=url, timeout=30) as http:
            # The second page of a prefix halfway down the list, by its next-page token.
            page = await http.get("/budgets", params={"q": "console/org050"})
            deep = NEXT.search(page.text)
            assert deep is not None, "the search page has no next page"
            paths = {
                "first page": ("/budgets", {}),
                "deep page": (
                    "/budgets",
                    {"q": "console/org050", "page": deep[1].replace("&amp;", "&")},
                ),
                "search": ("/budgets", {"q": "console/org042/"}),
                "poll": ("/api/budgets", {"q": "console/"}),
            }
            turn = iter(range(10**12))

            async def step(loop: Loop) -> None:
                kind = PAGES[next(turn) % len(PAGES)]
                path, params = paths[kind]
                began = time.perf_counter()
                answer = await http.get(path, params=params)
                assert answer.status_code == 200, answer.text[:200]
                loop.record(kind, began)

            for _ in range(env.runs):
                loop = await closed_loop(READERS, env.seconds, step)
                for i, kind in enumerate(PAGES):
                    out[i].values.append(loop.ms(kind, 0.5))
                    out[len(PAGES) + i].values.append(loop.ms(kind, 0.99))
                out[-1].values.append(loop.rate(*PAGES))
    finally:
        process.terminate()
        try:
            await asyncio.wait_for(process.wait(), timeout=30)
        except TimeoutError:
            process.kill()
            await process.wait()
    await check_invariants(env, LABEL)
    return out
