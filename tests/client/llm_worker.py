"""A worker process for the metered-call race: it calls the fake provider through the
metered OpenAI client until Earmark refuses, and prints what it did as one JSON line."""

from __future__ import annotations

import json
import sys

import openai

from earmark.client import Client, RefusedError
from earmark.client.llm import metered

PROMPT = "x" * 4_000


def main(target: str, provider_url: str, budget_id: str, streaming: bool) -> None:
    done = {"calls": 0, "refused": 0, "streamed": streaming}
    with (
        Client(target) as earmark,
        openai.OpenAI(api_key="fake", base_url=provider_url) as provider,
    ):
        llm = metered(provider, earmark, budget_id, job="race")
        while True:
            request = {
                "model": "gpt-4o",
                "max_tokens": 400,
                "messages": [{"role": "user", "content": PROMPT}],
            }
            try:
                if streaming:
                    with llm.chat.completions.create(stream=True, **request) as stream:
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
    main(sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4] == "stream")
