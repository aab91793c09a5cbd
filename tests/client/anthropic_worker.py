"""A worker process for the Anthropic race: it calls the fake Anthropic through the metered
client until Earmark refuses (mode plain: messages.create; stream: messages.stream; events:
create(stream=True)), and prints what it did as one JSON line."""

from __future__ import annotations

import json
import sys
from typing import Any

import anthropic

from earmark.client import Client, RefusedError
from earmark.client.llm import metered

PROMPT = "x" * 4_000


def main(target: str, provider_url: str, budget_id: str, model: str, mode: str) -> None:
    done: dict[str, Any] = {"calls": 0, "refused": 0, "mode": mode}
    with (
        Client(target) as earmark,
        anthropic.Anthropic(api_key="fake", base_url=provider_url) as provider,
    ):
        llm = metered(provider, earmark, budget_id, job="race")
        request: dict[str, Any] = {
            "model": model,
            "max_tokens": 400,
            "system": "You answer briefly.",
            "messages": [{"role": "user", "content": PROMPT}],
        }
        while True:
            try:
                if mode == "stream":
                    with llm.messages.stream(**request) as stream:
                        for _ in stream.text_stream:
                            pass
                elif mode == "events":
                    events: Any = llm.messages.create(stream=True, **request)
                    with events:
                        for _ in events:
                            pass
                else:
                    llm.messages.create(**request)
            except RefusedError:
                done["refused"] += 1
                break
            done["calls"] += 1
    print(json.dumps(done), flush=True)


if __name__ == "__main__":
    main(*sys.argv[1:6])
