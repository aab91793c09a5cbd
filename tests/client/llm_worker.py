"""A worker process for the metered-call tests: it calls the fake provider through the
metered OpenAI client until Earmark refuses, and prints what it did as one JSON line
(modes plain and stream); or (mode slow) makes one call the provider answers only when
told, on 1 s leases, and is killed during it."""

from __future__ import annotations

import json
import sys
from typing import Any

import openai

from earmark.client import Client, RefusedError
from earmark.client.llm import metered

PROMPT = "x" * 4_000


def main(target: str, provider_url: str, budget_id: str, mode: str) -> None:
    streaming = mode == "stream"
    done = {"calls": 0, "refused": 0, "streamed": streaming}
    with (
        Client(target) as earmark,
        openai.OpenAI(api_key="fake", base_url=provider_url) as provider,
    ):
        if mode == "slow":
            slow = metered(provider, earmark, budget_id, lease_seconds=1.0)
            slow.chat.completions.create(
                model="gpt-4o", max_tokens=100, messages=[{"role": "user", "content": "slow"}]
            )
            return
        llm = metered(provider, earmark, budget_id, job="race")
        while True:
            request: dict[str, Any] = {
                "model": "gpt-4o",
                "max_tokens": 400,
                "messages": [{"role": "user", "content": PROMPT}],
            }
            try:
                if streaming:
                    streamed: Any = llm.chat.completions.create(stream=True, **request)
                    with streamed as stream:
                        for _ in stream:
                            pass
                else:
                    llm.chat.completions.create(**request)
            except RefusedError:
                done["refused"] += 1
                break
            done["calls"] += 1
    print(json.dumps(done), flush=True)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4])
