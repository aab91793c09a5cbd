"""Not tests: the worker process of the Bedrock race (test_metered_bedrock.py). It calls
the fake Bedrock through a metered boto3 bedrock-runtime client until Earmark refuses
(mode converse, invoke, converse_stream or invoke_stream), and prints what it did as one
JSON line."""

from __future__ import annotations

import json
import sys
from typing import Any

import boto3  # type: ignore[import-untyped]

from earmark.client import Client, RefusedError
from earmark.client.llm import metered

PROMPT = "x" * 8_000
MAX_TOKENS = 400


def main(target: str, provider_url: str, budget_id: str, model: str, mode: str) -> None:
    done: dict[str, Any] = {"calls": 0, "refused": 0, "mode": mode}
    session = boto3.Session(
        aws_access_key_id="AKIDTEST", aws_secret_access_key="secret", region_name="us-east-1"
    )
    with Client(target) as earmark:
        runtime = session.client("bedrock-runtime", endpoint_url=provider_url)
        llm = metered(runtime, earmark, budget_id, job="race")
        messages = [{"role": "user", "content": [{"text": PROMPT}]}]
        converse: dict[str, Any] = {
            "modelId": model,
            "system": [{"text": "You answer briefly."}],
            "messages": messages,
            "inferenceConfig": {"maxTokens": MAX_TOKENS},
        }
        body = json.dumps(
            {
                "anthropic_version": "bedrock-2023-05-31",
                "max_tokens": MAX_TOKENS,
                "system": "You answer briefly.",
                "messages": [{"role": "user", "content": PROMPT}],
            }
        )
        while True:
            try:
                if mode == "converse":
                    llm.converse(**converse)
                elif mode == "converse_stream":
                    for _ in llm.converse_stream(**converse)["stream"]:
                        pass
                elif mode == "invoke":
                    llm.invoke_model(modelId=model, body=body)["body"].read()
                else:
                    answer = llm.invoke_model_with_response_stream(modelId=model, body=body)
                    for _ in answer["body"]:
                        pass
            except RefusedError:
                done["refused"] += 1
                break
            done["calls"] += 1
    print(json.dumps(done), flush=True)


if __name__ == "__main__":
    main(*sys.argv[1:6])
