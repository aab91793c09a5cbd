"""metered() of boto3's bedrock-runtime client (metered_bedrock.py): the real boto3 against
the fake Bedrock (fake_bedrock.py) over HTTP on 127.0.0.1, each call held, capped and
settled through a live sidecar. One sidecar and one fake serve the whole module (each test
on budgets of its own); boto3 is synchronous, so each test's worker code runs on a thread
while the sidecar serves on the module's loop."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import json
import shutil
import sys
import tempfile
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import asyncpg
import boto3  # type: ignore[import-untyped]
import pytest
import pytest_asyncio
from botocore.config import Config  # type: ignore[import-untyped]
from botocore.exceptions import (  # type: ignore[import-untyped]
    ClientError,
    EndpointConnectionError,
    EventStreamError,
    ParamValidationError,
)

from earmark.client import AsyncClient, Client, RefusedError
from earmark.client.llm import Meter, metered
from earmark.client.wire_bedrock import PROVIDER, Converse, InvokeAnthropic, InvokeNova
from earmark.server import Sidecar
from earmark.v1 import budget_pb2 as pb
from tests.client.fake_bedrock import BedrockState, FakeBedrock, fake_bedrock
from tests.client.llm_helpers import CEILING, CLAUDE_RATES, budget, closed_port, holds, put_price
from tests.conftest import TABLES, Running, running, sidecar_settings
from tests.helpers import assert_invariants, child

pytestmark = [pytest.mark.asyncio(loop_scope="module"), pytest.mark.xdist_group("bedrock")]

ROOT = Path(__file__).resolve().parents[2]
WORKER = Path(__file__).with_name("test_metered_bedrock_worker.py")
CLAUDE = "anthropic.claude-test-v1:0"
# genai-prices names an in-region Claude call (and a us./eu. profile's) regional.
PRICED_CLAUDE = "regional." + CLAUDE
NOVA = "amazon.nova-test-v1:0"
MESSAGES = [{"role": "user", "content": [{"text": "hello"}]}]
# What botocore does by default with a 500: three sends.
SENDS_ON_5XX = 3
ONE_SEND = Config(retries={"mode": "standard", "total_max_attempts": 1})
T = TypeVar("T")


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def priced(database_url: str) -> AsyncIterator[Running]:
    """The module's sidecar, on an emptied database, with the test prices for aws: Claude
    and Nova, cache reads and writes at their own rates."""
    conn = await asyncpg.connect(database_url)
    try:
        await conn.execute(f"TRUNCATE {TABLES}")
    finally:
        await conn.close()
    folder = Path(tempfile.mkdtemp(prefix="em-"))
    try:
        async with running(Sidecar(sidecar_settings(database_url, folder)), database_url) as s:
            for model in (PRICED_CLAUDE, NOVA):
                await put_price(
                    s, PROVIDER, model,
                    input_usd_micros_per_mtok=CLAUDE_RATES.input,
                    output_usd_micros_per_mtok=CLAUDE_RATES.output,
                    cached_input_usd_micros_per_mtok=CLAUDE_RATES.cache_read,
                    cache_write_usd_micros_per_mtok=CLAUDE_RATES.cache_write,
                    max_output_tokens=CEILING,
                )  # fmt: skip
            yield s
    finally:
        shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture(scope="module")
def server() -> Iterator[FakeBedrock]:
    with fake_bedrock(BedrockState(rates=CLAUDE_RATES)) as fake:
        yield fake


@pytest.fixture
def fake(server: FakeBedrock) -> FakeBedrock:
    """The module's fake, its answers as they start, its record and bill empty."""
    fresh = BedrockState()
    state = server.state
    with state.lock:
        for name in ("usage", "anthropic_usage", "nova_usage", "served_tier", "cut"):
            setattr(state, name, getattr(fresh, name))
        state.exception = state.error = None
        state.requests.clear()
        state.billed.clear()
    return server


SESSION = boto3.Session(
    aws_access_key_id="AKIDTEST", aws_secret_access_key="secret", region_name="us-east-1"
)


def runtime(fake: FakeBedrock, config: Config | None = None) -> Any:
    return SESSION.client("bedrock-runtime", endpoint_url=fake.url, config=config)


async def in_worker(s: Running, budget_id: str, work: Callable[[Any], T], **meter: Any) -> T:
    """work(metered client) in a synchronous worker on a thread of its own (the sidecar
    serves on this loop), its Client closed (its settles sent) before this returns."""
    fake_url = meter.pop("url")
    config = meter.pop("config", None)

    def run() -> T:
        with Client(s.target) as earmark:
            client = SESSION.client("bedrock-runtime", endpoint_url=fake_url, config=config)
            return work(metered(client, earmark, budget_id, **meter))

    return await asyncio.to_thread(run)


async def one_hold(s: Running, budget_id: str) -> tuple[pb.Hold, pb.BudgetState]:
    (hold,) = await holds(s, budget_id)
    state = await s.admin.GetBudget(pb.GetBudgetRequest(budget_id=budget_id))
    return hold, state


async def settled_at_the_bill(s: Running, budget_id: str, fake: FakeBedrock) -> pb.Hold:
    """The one hold settled at exactly what the fake billed, nothing left held."""
    hold, state = await one_hold(s, budget_id)
    assert (pb.RESERVATION_STATE_SETTLED, fake.state.billed_micros()) == (
        hold.state,
        hold.settled_used,
    )
    assert (hold.settled_used, 0) == (state.used, state.held)
    await assert_invariants(s.dsn)
    return hold


def sent_body(fake: FakeBedrock) -> dict[str, Any]:
    [request] = fake.state.requests
    return request.body


def shape_cost(prompt: int, output: int) -> int:
    """What the sidecar holds: the prompt's estimate at the input rate and output at the
    output rate, rounded up once."""
    return -(-(prompt * CLAUDE_RATES.input + output * CLAUDE_RATES.output) // 1_000_000)


# The fake's Converse usage: 12 input tokens besides 30 read from the cache and 5 written
# to it, 7 output; each at its rate, rounded up once:
# 12 * 25 + 30 * 2.5 + 5 * 31.25 + 7 * 100 = 300 + 75 + 156.25 + 700 = 1231.25 -> 1232.
BILL = 1232


async def test_converse_is_held_capped_and_settled_at_the_bill(
    priced: Running, fake: FakeBedrock
) -> None:
    """converse() is held for its prompt and its maxTokens before it is sent, sent with
    that maximum, and settled at exactly the fake's bill, cache reads and writes at their
    own rates though Bedrock's inputTokens counts neither; the same client comes back."""
    await budget(priced, "converse", 5_000_000)
    params = {"modelId": CLAUDE, "messages": MESSAGES, "inferenceConfig": {"maxTokens": 1000}}
    given: list[Any] = []

    def work(client: Any) -> Any:
        given.append(client)
        return client.converse(**params)

    answer = await in_worker(priced, "converse", work, url=fake.url)
    assert answer["output"]["message"]["content"] == [{"text": "Hello"}]
    assert type(given[0]).__name__ == "BedrockRuntime"
    assert sent_body(fake)["inferenceConfig"] == {"maxTokens": 1000}
    hold = await settled_at_the_bill(priced, "converse", fake)
    assert BILL == hold.settled_used
    prompt = Converse().call(params, Meter("")).prompt_tokens
    assert shape_cost(prompt, 1000) == hold.amount


async def test_a_call_without_a_maximum_is_sent_the_ceiling_and_streams_settle_at_metadata(
    priced: Running, fake: FakeBedrock
) -> None:
    """converse_stream() without inferenceConfig is held for the model's ceiling and sent
    maxTokens = the ceiling; read to its end, it settles at its metadata event's usage."""
    await budget(priced, "stream", 5_000_000)

    def work(client: Any) -> list[str]:
        answer = client.converse_stream(modelId=f"us.{CLAUDE}", messages=MESSAGES)
        return [next(iter(event)) for event in answer["stream"]]

    kinds = await in_worker(priced, "stream", work, url=fake.url)
    assert kinds[-1] == "metadata"
    assert sent_body(fake)["inferenceConfig"] == {"maxTokens": CEILING}
    hold = await settled_at_the_bill(priced, "stream", fake)
    assert BILL == hold.settled_used


def anthropic_body(max_tokens: int) -> str:
    return json.dumps(
        {
            "anthropic_version": "bedrock-2023-05-31",
            "max_tokens": max_tokens,
            "messages": [{"role": "user", "content": "hello"}],
        }
    )


@pytest.mark.parametrize("stream", [False, True])
async def test_invoke_model_anthropic_settles_at_the_bill(
    priced: Running, fake: FakeBedrock, stream: bool
) -> None:
    """invoke_model (its body read for the usage and put back whole) and
    invoke_model_with_response_stream (its final usage) of an Anthropic model: held for
    the body's max_tokens and sent it, settled at Anthropic's usage with its cache reads
    and writes (the same counts as Converse's: the same bill)."""
    budget_id = f"invoke-{stream}"
    await budget(priced, budget_id, 5_000_000)
    body = anthropic_body(1_000)

    def work(client: Any) -> Any:
        if stream:
            answer = client.invoke_model_with_response_stream(modelId=CLAUDE, body=body)
            return [json.loads(e["chunk"]["bytes"])["type"] for e in answer["body"]]
        return json.loads(client.invoke_model(modelId=CLAUDE, body=body)["body"].read())

    got = await in_worker(priced, budget_id, work, url=fake.url)
    if stream:
        assert got[-1] == "message_stop"
    else:
        assert got["content"] == [{"type": "text", "text": "Hi"}]
    assert sent_body(fake)["max_tokens"] == 1_000
    hold = await settled_at_the_bill(priced, budget_id, fake)
    assert BILL == hold.settled_used
    call = InvokeAnthropic().call({"modelId": CLAUDE, "body": body}, Meter(""))
    assert shape_cost(call.prompt_tokens, 1_000) == hold.amount


@pytest.mark.parametrize("stream", [False, True])
async def test_invoke_model_nova_settles_at_the_bill(
    priced: Running, fake: FakeBedrock, stream: bool
) -> None:
    """An Amazon Nova body (messages-v1): capped through inferenceConfig.max_new_tokens,
    settled at Nova's usage, its cache reads by Nova's names:
    42 * 25 + 20 * 2.5 + 128 * 100 = 1050 + 50 + 12800 = 13900."""
    budget_id = f"nova-{stream}"
    await budget(priced, budget_id, 5_000_000)
    request = {"schemaVersion": "messages-v1", "messages": MESSAGES, "inferenceConfig": {}}
    body = json.dumps(request)

    def work(client: Any) -> Any:
        if stream:
            answer = client.invoke_model_with_response_stream(modelId=NOVA, body=body)
            return [json.loads(e["chunk"]["bytes"]) for e in answer["body"]]
        return json.loads(client.invoke_model(modelId=NOVA, body=body)["body"].read())

    await in_worker(priced, budget_id, work, url=fake.url)
    assert sent_body(fake)["inferenceConfig"] == {"max_new_tokens": CEILING}
    hold = await settled_at_the_bill(priced, budget_id, fake)
    assert 13_900 == hold.settled_used
    call = InvokeNova().call({"modelId": NOVA, "body": body}, Meter(""))
    assert shape_cost(call.prompt_tokens, CEILING) == hold.amount


SURFACES: dict[str, Callable[[Any], Any]] = {
    "converse": lambda c: c.converse(modelId=CLAUDE, messages=MESSAGES),
    "converse_stream": lambda c: c.converse_stream(modelId=CLAUDE, messages=MESSAGES),
    "invoke_model": lambda c: c.invoke_model(modelId=CLAUDE, body=anthropic_body(100)),
    "invoke_model_with_response_stream": lambda c: c.invoke_model_with_response_stream(
        modelId=NOVA, body=json.dumps({"schemaVersion": "messages-v1", "messages": MESSAGES})
    ),
}


async def test_an_empty_budget_refuses_every_surface_before_sending(
    priced: Running, fake: FakeBedrock
) -> None:
    """On a budget with nothing left, each surface raises RefusedError before anything is
    sent: the fake saw no request, nothing is held or used."""
    await budget(priced, "empty", 0)

    def work(client: Any) -> list[str]:
        refused = []
        for name, call in SURFACES.items():
            with contextlib.suppress(RefusedError):
                call(client)
                continue
            refused.append(name)
        return refused

    assert list(SURFACES) == await in_worker(priced, "empty", work, url=fake.url)
    assert [] == fake.state.requests
    state = await priced.admin.GetBudget(pb.GetBudgetRequest(budget_id="empty"))
    assert (0, 0, 0) == (state.used, state.held, state.open_reservations)


@pytest.mark.parametrize("how", ["cut", "exception", "closed", "dropped", "kept"])
async def test_a_stream_that_ends_without_its_usage_is_in_doubt(
    priced: Running, fake: FakeBedrock, how: str
) -> None:
    """A ConverseStream cut before its metadata event, one that ends with a modelled
    exception, one the caller closes early, one the caller drops unread and one still
    unread when the Earmark client closes: each leaves its hold in doubt with its prompt
    charged."""
    budget_id = f"doubt-{how}"
    await budget(priced, budget_id, 5_000_000)
    fake.state.cut = how == "cut"
    fake.state.exception = "throttlingException" if how == "exception" else None

    def work(client: Any) -> Any:
        answer = client.converse_stream(modelId=CLAUDE, messages=MESSAGES)
        stream = answer["stream"]
        if how == "kept":
            return stream  # past the Client's close
        if how == "closed":
            next(iter(stream))
            stream.close()
        elif how == "dropped":
            del answer, stream
            gc.collect()
        elif how == "exception":
            with pytest.raises(EventStreamError):
                list(stream)
        else:
            with contextlib.suppress(Exception):
                list(stream)
        return None

    kept = await in_worker(priced, budget_id, work, url=fake.url)
    hold, state = await one_hold(priced, budget_id)
    assert pb.RESERVATION_STATE_IN_DOUBT == hold.state
    assert (hold.charged, hold.amount - hold.charged) == (state.used, state.held)
    assert hold.charged > 0
    await assert_invariants(priced.dsn)
    if kept is not None:
        kept.close()


async def test_error_statuses_and_connections(priced: Running, fake: FakeBedrock) -> None:
    """A 500 is sent three times (botocore's retries) on the call's one hold, left in
    doubt; a 400 settles at nothing; a refused connection settles at nothing; botocore's
    own parameter check raises with nothing held. Each error is botocore's."""
    for budget_id in ("e500", "e400", "refused", "invalid"):
        await budget(priced, budget_id, 5_000_000)
    fake.state.error = 500

    def converse(client: Any) -> None:
        client.converse(modelId=CLAUDE, messages=MESSAGES)

    with pytest.raises(ClientError, match="InternalServerException"):
        await in_worker(priced, "e500", converse, url=fake.url)
    assert SENDS_ON_5XX == len(fake.state.requests)
    hold, _ = await one_hold(priced, "e500")
    assert pb.RESERVATION_STATE_IN_DOUBT == hold.state
    fake.state.error = 400
    with pytest.raises(ClientError, match="ValidationException"):
        await in_worker(priced, "e400", converse, url=fake.url)
    hold, state = await one_hold(priced, "e400")
    assert (pb.RESERVATION_STATE_SETTLED, 0, 0) == (hold.state, hold.settled_used, state.held)
    url = f"http://127.0.0.1:{closed_port()}"
    with pytest.raises(EndpointConnectionError):
        await in_worker(priced, "refused", converse, url=url, config=ONE_SEND)
    hold, state = await one_hold(priced, "refused")
    assert (pb.RESERVATION_STATE_SETTLED, 0, 0) == (hold.state, hold.settled_used, state.held)

    def invalid(client: Any) -> None:
        client.converse(modelId=CLAUDE, messages=[{"role": "user", "content": "not blocks"}])

    with pytest.raises(ParamValidationError):
        await in_worker(priced, "invalid", invalid, url=fake.url)
    assert [] == await holds(priced, "invalid")
    await assert_invariants(priced.dsn)


async def test_an_answer_after_a_retried_5xx_leaves_the_call_in_doubt(
    priced: Running, fake: FakeBedrock
) -> None:
    """An attempt answered 500 may have run at AWS: the attempt botocore retries it with
    answers, and the call's one hold goes in doubt (not settled at the last answer)."""
    await budget(priced, "retried", 5_000_000)
    from botocore.awsrequest import AWSResponse  # type: ignore[import-untyped]

    first: list[bool] = []

    def failing_once(**_: Any) -> AWSResponse | None:
        if first:
            return None
        first.append(True)
        body = b'{"message": "the first attempt failed"}'
        headers = {"x-amzn-errortype": "InternalServerException"}

        class Raw:
            def stream(self, **_: Any) -> Any:
                yield body

        return AWSResponse("http://fake", 500, headers, Raw())

    def converse(client: Any) -> Any:
        client.meta.events.register("before-send.bedrock-runtime", failing_once)
        return client.converse(modelId=CLAUDE, messages=MESSAGES)

    answer = await in_worker(priced, "retried", converse, url=fake.url)
    hold, _ = await one_hold(priced, "retried")
    assert (1, pb.RESERVATION_STATE_IN_DOUBT) == (len(fake.state.requests), hold.state)
    assert answer["usage"]["outputTokens"] > 0
    await assert_invariants(priced.dsn)


async def test_metered_takes_a_sync_client_and_bedrock_runtime_only(
    priced: Running, fake: FakeBedrock
) -> None:
    """An AsyncClient is refused (boto3 is synchronous), so is another AWS service's client
    and a client metered twice; a free operation passes unheld."""
    client = runtime(fake)
    async with AsyncClient(priced.target) as earmark:
        with pytest.raises(TypeError, match="synchronous"):
            metered(client, earmark, "b")

    def work(metered_client: Any) -> int:
        with pytest.raises(TypeError, match="metered already"):
            metered(metered_client, Client.__new__(Client), "b")
        other = SESSION.client("sts", endpoint_url=fake.url)
        with pytest.raises(TypeError, match="bedrock-runtime"):
            metered(other, Client.__new__(Client), "b")
        counted = metered_client.count_tokens(
            modelId=CLAUDE, input={"converse": {"messages": MESSAGES}}
        )
        return int(counted["inputTokens"])

    await budget(priced, "free", 5_000_000)
    assert 10 == await in_worker(priced, "free", work, url=fake.url)
    assert [] == await holds(priced, "free")


# The race's usage: 1,200 input tokens besides 500 read from the cache and 100 written,
# 300 output, below the prompt's estimate and the 400 asked: no settle passes its hold.
RACE_USAGE = {"inputTokens": 1200, "outputTokens": 300, "cacheReadInputTokens": 500,
              "cacheWriteInputTokens": 100, "totalTokens": 2100}  # fmt: skip
RACE_ANTHROPIC = {"input_tokens": 1200, "output_tokens": 300, "cache_read_input_tokens": 500,
                  "cache_creation_input_tokens": 100}  # fmt: skip


@pytest.mark.slow
async def test_five_bedrock_workers_never_spend_past_five_dollars(
    priced: Running, fake: FakeBedrock
) -> None:
    """Five worker processes (converse, invoke_model, two converse_stream and one
    invoke_model_with_response_stream) call the fake Bedrock through metered clients on
    one $5.00 task until each is refused: the budget's used is exactly what the fake
    billed, cache reads and writes included, nothing is left held, and the audit is
    clean."""
    await budget(priced, "task", 5_000_000)
    fake.state.usage, fake.state.anthropic_usage = dict(RACE_USAGE), dict(RACE_ANTHROPIC)

    def worker(mode: str) -> contextlib.AbstractAsyncContextManager[asyncio.subprocess.Process]:
        return child(
            sys.executable, str(WORKER), priced.target, fake.url, "task", CLAUDE, mode,
            stdout=asyncio.subprocess.PIPE, cwd=ROOT,
        )  # fmt: skip

    async with contextlib.AsyncExitStack() as stack:
        modes = ["converse", "invoke", "converse_stream", "converse_stream", "invoke_stream"]
        processes = [await stack.enter_async_context(worker(mode)) for mode in modes]
        outs = await asyncio.wait_for(
            asyncio.gather(*(p.communicate() for p in processes)), timeout=120
        )
    done = [json.loads(out) for out, _ in outs]
    state = await priced.admin.GetBudget(pb.GetBudgetRequest(budget_id="task"))
    calls = sum(d["calls"] for d in done)
    print(f"bedrock race: {calls} calls, used {state.used} of 5000000 usd_micros, {done}")
    assert [0] * 5 == [p.returncode for p in processes]
    assert [1] * 5 == [d["refused"] for d in done]
    assert calls == len(fake.state.billed)
    assert (fake.state.billed_micros(), 0, 0) == (
        state.used,
        state.held,
        state.open_reservations,
    )
    assert state.used <= 5_000_000
    await assert_invariants(priced.dsn)
