"""A worker process for the journal test: one metered call with a settlement journal,
whose Settle never reaches the sidecar (it waits for good, as a worker about to die
would), so that the test can kill it once the provider answered and the journal holds the
Settle."""

from __future__ import annotations

import asyncio
import sys
from typing import Any

import openai

from earmark.client import Client
from earmark.client.llm import metered


def main(target: str, provider_url: str, budget_id: str, journal: str) -> None:
    with openai.OpenAI(api_key="fake", base_url=provider_url) as provider:
        earmark = Client(target, journal_dir=journal)
        calls = earmark._async._budget_call

        async def stalled(method: str, request: Any) -> Any:
            if method == "Settle":
                await asyncio.Event().wait()  # the process is killed while it waits
            return await calls(method, request)

        earmark._async._budget_call = stalled  # type: ignore[method-assign]
        metered(provider, earmark, budget_id).chat.completions.create(
            model="gpt-4o", max_tokens=100, messages=[{"role": "user", "content": "hello"}]
        )
        print("answered", flush=True)
        # The Settle is on its way in the background: wait to be killed.
        asyncio.run(asyncio.sleep(3600))


if __name__ == "__main__":
    main(*sys.argv[1:5])
