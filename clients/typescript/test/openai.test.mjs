// metered() on the real `openai` client against the fake OpenAI of tests/fake_openai.py
// (FAKE_OPENAI_URL): chat completions (every surface), embeddings, the routes that pass
// through or are refused, and how failures settle. The fake answers 300 completion tokens
// (at most the request's maximum) and counts a prompt as its messages' characters over four,
// plus one; at the test's rates (helpers.mjs: 2 micro-dollars an input token, 8 an output
// token) a call costs exactly 2 * prompt + 8 * completion, which is what the budget must
// show as used once the call is settled.
import assert from 'node:assert/strict';
import http from 'node:http';
import { after, before, test } from 'node:test';
import OpenAI from 'openai';
import { EndpointNotMeteredError, RefusedError, metered } from '../dist/esm/index.js';
import {
  CEILING,
  CHUNKED_TEXTS,
  FAKE_OPENAI_CHUNKED_URL,
  FAKE_OPENAI_URL,
  NEVER_SENT,
  client,
  ledger,
  putPrice,
  usdBudget,
  wireSpy,
} from './helpers.mjs';

const earmark = client();
const model = `gpt-ts-${process.pid}`;
const spy = wireSpy(earmark);
const openai = new OpenAI({ baseURL: FAKE_OPENAI_URL, apiKey: 'sk-fake', timeout: 10_000, fetch: spy.fetch });
const ask = (text) => [{ role: 'user', content: text }];
// "One line on row locks." is 22 characters: Earmark's estimate is ceil(22 / 3) + 4 + 3 =
// 15 tokens; the fake bills floor(22 / 4) + 1 = 6 prompt tokens.
const QUESTION = 'One line on row locks.';
const ANSWER_SCHEMA = {
  type: 'object',
  properties: { answer: { type: 'string' } },
  required: ['answer'],
  additionalProperties: false,
};

before(async () => {
  assert.ok(FAKE_OPENAI_URL, 'FAKE_OPENAI_URL is set by tests/clients/test_typescript.py');
  await putPrice(earmark, 'openai', model);
  await putPrice(earmark, 'openai', model, { tier: 'priority', scale: 2 });
});
after(() => earmark.close());

/** A metered client of the spy's fake on a new budget of limit, watched by the spy. */
async function meteredOn(name, limit, options = {}, client = openai) {
  const id = await usdBudget(earmark, name, limit);
  spy.watch(id);
  return { id, llm: metered(client, earmark, id, options) };
}

/** The state the spy saw as the only request left: [used, held, openReservations]. */
function atSend() {
  assert.equal(spy.sent.length, 1, `one request reached the wire, not ${spy.sent.length}`);
  const { state } = spy.sent[0];
  return [state.used, state.held, state.openReservations];
}

test('metered() answers a client of the OpenAI class itself', async () => {
  const { llm } = await meteredOn('class', 1_000_000);
  assert.ok(llm instanceof OpenAI);
  assert.ok(llm.withOptions({ timeout: 5_000 }) instanceof OpenAI);
});

test('chat.completions.create is held before it is sent and settled at what the fake billed', async () => {
  const { id, llm } = await meteredOn('chat-create', 1_000_000);
  const reply = await llm.chat.completions.create({ model, max_tokens: 500, messages: ask(QUESTION) });
  assert.deepEqual([reply.usage.prompt_tokens, reply.usage.completion_tokens], [6, 300]);
  // Held 2 * 15 + 8 * 500 = 4030, of which the prompt's 30 was charged by the Reserve.
  assert.deepEqual(atSend(), [30, 4_000, 1]);
  assert.deepEqual([spy.sent[0].body.max_tokens, spy.sent[0].body.max_completion_tokens], [500, undefined]);
  assert.deepEqual(await ledger(earmark, id), [2 * 6 + 8 * 300, 0, 0]);
});

test('a chat stream asks for its usage, hides the usage chunk and settles at it', async () => {
  const { id, llm } = await meteredOn('chat-stream', 1_000_000);
  const stream = await llm.chat.completions.create({ model, max_tokens: 500, stream: true, messages: ask(QUESTION) });
  let content = '';
  let usageChunks = 0;
  for await (const chunk of stream) {
    if (chunk.choices.length === 0) usageChunks += 1;
    content += chunk.choices[0]?.delta?.content ?? '';
  }
  assert.equal(content, 'tok '.repeat(300));
  assert.equal(usageChunks, 0);
  assert.deepEqual(spy.sent[0].body.stream_options, { include_usage: true });
  assert.deepEqual(atSend(), [30, 4_000, 1]);
  assert.deepEqual(await ledger(earmark, id), [2 * 6 + 8 * 300, 0, 0]);
});

test('a chat stream whose caller asked for the usage chunk still sees it', async () => {
  const { id, llm } = await meteredOn('chat-stream-usage', 1_000_000);
  const stream = await llm.chat.completions.create({
    model, max_tokens: 500, stream: true, stream_options: { include_usage: true }, messages: ask(QUESTION),
  });
  const usages = [];
  for await (const chunk of stream) if (chunk.usage) usages.push(chunk.usage.completion_tokens);
  assert.deepEqual(usages, [300]);
  assert.deepEqual(await ledger(earmark, id), [2 * 6 + 8 * 300, 0, 0]);
});

test('the chat stream helper is held and settled at the fake bill', async () => {
  const { id, llm } = await meteredOn('chat-helper', 1_000_000);
  const stream = llm.chat.completions.stream({ model, max_tokens: 500, messages: ask(QUESTION) });
  const final = await stream.finalChatCompletion();
  assert.equal(final.choices[0].message.content, 'tok '.repeat(300));
  assert.deepEqual(atSend(), [30, 4_000, 1]);
  assert.deepEqual(await ledger(earmark, id), [2 * 6 + 8 * 300, 0, 0]);
});

test('chat.completions.parse is held and settled at the fake bill for its structured answer', async () => {
  const { id, llm } = await meteredOn('chat-parse', 1_000_000);
  const reply = await llm.chat.completions.parse({
    model, max_tokens: 500, messages: ask(QUESTION),
    response_format: { type: 'json_schema', json_schema: { name: 'answer', schema: ANSWER_SCHEMA, strict: true } },
  });
  // The fake answers {"answer": "fake"}: 18 characters, 6 tokens at 3 characters a token.
  assert.deepEqual(reply.choices[0].message.parsed, { answer: 'fake' });
  assert.equal(reply.usage.completion_tokens, 6);
  assert.deepEqual(atSend(), [30, 4_000, 1]);
  assert.deepEqual(await ledger(earmark, id), [2 * 6 + 8 * 6, 0, 0]);
});

test('withResponse() and asResponse() are metered, and the answer names its hold', async () => {
  const { id, llm } = await meteredOn('chat-raw', 1_000_000);
  const { data, response } = await llm.chat.completions.create({ model, max_tokens: 500, messages: ask(QUESTION) }).withResponse();
  assert.equal(data.usage.completion_tokens, 300);
  assert.match(response.headers.get('x-earmark-reservation-id'), /^[0-9a-f-]{36}$/);
  assert.deepEqual([response.headers.get('x-earmark-max-output-tokens'), response.headers.get('x-earmark-degraded')], ['500', 'false']);
  const raw = await llm.chat.completions.create({ model, max_tokens: 500, messages: ask(QUESTION) }).asResponse();
  assert.equal((await raw.json()).usage.completion_tokens, 300);
  assert.deepEqual(await ledger(earmark, id), [2 * (2 * 6 + 8 * 300), 0, 0]);
});

test('embeddings are held for their input alone and settled at the fake bill', async () => {
  const { id, llm } = await meteredOn('embeddings', 1_000_000);
  const reply = await llm.embeddings.create({ model, input: ['row locks and MVCC', 'vacuum'] });
  // The fake bills floor(18 / 4) + 1 + floor(6 / 4) + 1 = 7 tokens; Earmark held
  // ceil(18 / 3) + 3 + ceil(6 / 3) + 3 = 14 of them, all charged by the Reserve.
  assert.equal(reply.usage.prompt_tokens, 7);
  assert.deepEqual(atSend(), [2 * 14, 0, 1]);
  assert.deepEqual(await ledger(earmark, id), [2 * 7, 0, 0]);
});

test('every chat and embeddings surface is refused before sending on an empty budget', async () => {
  const { id, llm } = await meteredOn('empty', 0);
  const request = { model, max_tokens: 500, messages: ask(NEVER_SENT) };
  // "never-sent" is 10 characters: a chat call needs 2 * (4 + 4 + 3) + 8 * 500 = 4,022, an
  // embedding 2 * (4 + 3) = 14.
  const needs = { embeddings: 14 };
  const calls = {
    create: () => llm.chat.completions.create(request),
    stream: () => llm.chat.completions.create({ ...request, stream: true }),
    helper: () => llm.chat.completions.stream(request).finalChatCompletion(),
    parse: () => llm.chat.completions.parse(request),
    withResponse: () => llm.chat.completions.create(request).withResponse(),
    embeddings: () => llm.embeddings.create({ model, input: NEVER_SENT }),
  };
  for (const [surface, call] of Object.entries(calls)) {
    const error = await call().catch((e) => e);
    // Thrown as the SDK's own base error too, so that the stream helper passes it on as it is.
    assert.ok(error instanceof RefusedError && error instanceof OpenAI.OpenAIError, `${surface}: ${error}`);
    assert.deepEqual([error.reason, error.refusal.reason, error.message], ['INSUFFICIENT_BUDGET', 'INSUFFICIENT_BUDGET', `${id}: needs ${needs[surface] ?? 4_022}, 0 left`], surface);
  }
  assert.equal(spy.sent.length, 0);
  assert.deepEqual(await ledger(earmark, id), [0, 0, 0]);
});

test('an endpoint that bills and cannot be priced is refused unsent, once, naming it', async () => {
  const { id, llm } = await meteredOn('images', 1_000_000);
  const error = await llm.images.generate({ model: 'dall-e-3', prompt: NEVER_SENT }).catch((e) => e);
  assert.ok(error instanceof EndpointNotMeteredError, String(error));
  assert.equal(
    error.message,
    'POST /v1/images/generations bills and Earmark cannot price it; not sent ' +
      '(docs/sdk-typescript.md lists the endpoints that are metered)',
  );
  assert.deepEqual([error.reason, error.about.endpoint], ['ENDPOINT_NOT_METERED', 'POST /v1/images/generations']);
  assert.equal(spy.sent.length, 0);
  assert.deepEqual(await ledger(earmark, id), [0, 0, 0]);
});

test('work billed out of its call is refused unsent, under any base URL path (issue 42)', async () => {
  // Resuming fine-tuning restarts paid training; a container's files once passed as free
  // for ending in /files. A copy under another base URL path is routed under it.
  const { id, llm } = await meteredOn('doors', 1_000_000);
  const proxied = llm.withOptions({ baseURL: FAKE_OPENAI_URL.replace(/\/v1$/, '/proxy/v1') });
  const calls = [
    llm.fineTuning.jobs.resume('ftjob-1'),
    llm.containers.create({ name: NEVER_SENT }),
    llm.containers.files.create('cntr_1', { file_id: NEVER_SENT }),
    proxied.fineTuning.jobs.resume('ftjob-1'),
    proxied.moderations.create({ input: 'hi' }).then(() => null, (e) => e.status),
  ];
  const outcomes = await Promise.all(calls.map((call) => call.catch((e) => e)));
  assert.deepEqual(outcomes.slice(0, 4).map((e) => (e instanceof EndpointNotMeteredError ? e.about.endpoint : String(e))), [
    'POST /v1/fine_tuning/jobs/ftjob-1/resume',
    'POST /v1/containers',
    'POST /v1/containers/cntr_1/files',
    'POST /proxy/v1/fine_tuning/jobs/ftjob-1/resume',
  ]);
  // The fake serves no /proxy/v1: the free moderation reached it, and was answered 404.
  assert.deepEqual([outcomes[4], spy.sent.map((r) => `${r.method} ${r.path}`)], [404, ['POST /proxy/v1/moderations']]);
  assert.deepEqual(await ledger(earmark, id), [0, 0, 0]);
});

test('requests that bill nothing pass through without a hold', async () => {
  const { id, llm } = await meteredOn('free', 1_000_000);
  // The fake knows none of these paths: it answers 404, which the SDK throws.
  const counted = await llm.responses.inputTokens.count({ model, input: 'hi' }).catch((e) => e);
  const moderated = await llm.moderations.create({ input: 'hi' }).catch((e) => e);
  const listed = await llm.models.list().catch((e) => e);
  assert.deepEqual([counted.status, moderated.status, listed.status], [404, 404, 404]);
  assert.deepEqual(
    spy.sent.map((r) => `${r.method} ${r.path}`),
    ['POST /v1/responses/input_tokens', 'POST /v1/moderations', 'GET /v1/models'],
  );
  assert.deepEqual(spy.sent.map((r) => r.state.openReservations), [0, 0, 0]);
  assert.deepEqual(await ledger(earmark, id), [0, 0, 0]);
});

test('ten calls without a caller limit on a HARD budget are told the ceiling and none is cut', async () => {
  const { id, llm } = await meteredOn('no-limit', 1_000_000);
  const finishes = [];
  for (let i = 0; i < 10; i += 1) {
    const reply = await llm.chat.completions.create({ model, messages: ask(QUESTION) });
    finishes.push(`${reply.choices[0].finish_reason} ${reply.usage.completion_tokens}`);
  }
  assert.deepEqual(finishes, Array(10).fill('stop 300'));
  assert.deepEqual(spy.sent.map((r) => r.body.max_completion_tokens), Array(10).fill(CEILING));
  // Each was held for the ceiling, 2 * 15 + 8 * 4096, its prompt charged by the Reserve.
  assert.deepEqual(spy.sent.map((r) => [r.state.held, r.state.openReservations]), Array(10).fill([8 * CEILING, 1]));
  assert.deepEqual(await ledger(earmark, id), [10 * (2 * 6 + 8 * 300), 0, 0]);
});

test('ten streams without a caller limit are read to their end', async () => {
  const { id, llm } = await meteredOn('no-limit-stream', 1_000_000);
  const read = [];
  for (let i = 0; i < 10; i += 1) {
    let tokens = 0;
    for await (const chunk of await llm.chat.completions.create({ model, stream: true, messages: ask(QUESTION) })) {
      tokens += chunk.choices[0]?.delta?.content ? 1 : 0;
    }
    read.push(tokens);
  }
  assert.deepEqual(read, Array(10).fill(300));
  assert.deepEqual(await ledger(earmark, id), [10 * (2 * 6 + 8 * 300), 0, 0]);
});

test('a 290-token stream under max_tokens=300, three tokens a chunk, is read to the end', async () => {
  assert.ok(FAKE_OPENAI_CHUNKED_URL, 'FAKE_OPENAI_CHUNKED_URL is set by tests/clients/test_typescript.py');
  const chunked = new OpenAI({ baseURL: FAKE_OPENAI_CHUNKED_URL, apiKey: 'sk-fake', timeout: 10_000 });
  const { id, llm } = await meteredOn('290', 1_000_000, {}, chunked);
  let content = '';
  let finish = null;
  for await (const chunk of await llm.chat.completions.create({ model, max_tokens: 300, stream: true, messages: ask(QUESTION) })) {
    content += chunk.choices[0]?.delta?.content ?? '';
    finish = chunk.choices[0]?.finish_reason ?? finish;
  }
  const expected = Array.from({ length: 290 }, (_, i) => CHUNKED_TEXTS[i % 3]).join('');
  assert.deepEqual([content, finish], [expected, 'stop']);
  assert.deepEqual(await ledger(earmark, id), [2 * 6 + 8 * 290, 0, 0]);
});

test('a stream with a tool call settles at the fake final usage', async () => {
  const { id, llm } = await meteredOn('tool-stream', 1_000_000);
  const tools = [{ type: 'function', function: { name: 'lookup', parameters: { type: 'object', properties: { city: { type: 'string' } } } } }];
  let args = '';
  for await (const chunk of await llm.chat.completions.create({ model, max_tokens: 500, stream: true, tools, messages: ask('tool') })) {
    args += chunk.choices[0]?.delta?.tool_calls?.[0]?.function?.arguments ?? '';
  }
  // The arguments {"city": "fake"} are 16 characters, 6 tokens; the prompt "tool" is 2.
  assert.equal(args, '{"city": "fake"}');
  assert.deepEqual(await ledger(earmark, id), [2 * 2 + 8 * 6, 0, 0]);
});

test('a stream with hidden reasoning settles at the fake final usage, reasoning included', async () => {
  const { id, llm } = await meteredOn('think-stream', 1_000_000);
  let content = '';
  for await (const chunk of await llm.chat.completions.create({ model, max_tokens: 500, stream: true, messages: ask('think') })) {
    content += chunk.choices[0]?.delta?.content ?? '';
  }
  // 64 reasoning tokens, never seen, then 300 of text; the prompt "think" is 2 tokens.
  assert.equal(content, 'tok '.repeat(300));
  assert.deepEqual(await ledger(earmark, id), [2 * 2 + 8 * (64 + 300), 0, 0]);
});

test('a stream cut before its usage is in doubt: the prompt charged, the rest still held', async () => {
  const { id, llm } = await meteredOn('cut', 1_000_000);
  let chunks = 0;
  const error = await (async () => {
    for await (const chunk of await llm.chat.completions.create({ model, max_tokens: 100, stream: true, messages: ask('cut') })) {
      chunks += chunk.choices.length;
    }
  })().catch((e) => e);
  // Half of the 100 tokens came; Node's fetch may end such a body quietly or throw.
  assert.equal(chunks, 50, String(error));
  // "cut" is 3 characters: a prompt of ceil(3 / 3) + 4 + 3 = 8 tokens, charged.
  assert.deepEqual(await ledger(earmark, id), [2 * 8, 8 * 100, 1]);
});

/**
 * A fetch whose event streams pass on their first event and then send nothing more until
 * their request is aborted: a provider still generating when the reader leaves. The fake
 * writes a whole stream at once, so without this whether its usage reached the metered
 * fetch before the reader's break is the machine's timing (a loaded one reads it all in one
 * chunk), and a stream whose usage came settles at it (the test after this one).
 */
function stillGenerating(fetch) {
  return async (input, init) => {
    const response = await fetch(input, init);
    if (!(response.headers.get('content-type') ?? '').includes('text/event-stream')) return response;
    const { signal } = init;
    assert.ok(signal, 'the SDK passes its fetch a signal, which aborts when the reader leaves');
    const source = response.body.getReader();
    const decoder = new TextDecoder();
    let text = '';
    let first = true;
    const body = new ReadableStream({
      async pull(controller) {
        if (!first) {
          await new Promise((resolve) => (signal.aborted ? resolve() : signal.addEventListener('abort', resolve, { once: true })));
          await source.cancel().catch(() => undefined);
          controller.error(signal.reason);
          return;
        }
        for (let end = -1; end < 0; end = text.indexOf('\n\n')) {
          const { done, value } = await source.read();
          assert.ok(!done, 'the fake stream has a first event');
          text += decoder.decode(value, { stream: true });
        }
        first = false;
        controller.enqueue(new TextEncoder().encode(text.slice(0, text.indexOf('\n\n') + 2)));
      },
      cancel: (reason) => source.cancel(reason),
    });
    return new Response(body, { status: response.status, statusText: response.statusText, headers: response.headers });
  };
}

/** A fetch that reads each answer whole before handing it on, as one chunk: a stream's
 * usage has come before its reader sees its first event. */
async function readWhole(input, init) {
  const response = await spy.fetch(input, init);
  const body = await response.arrayBuffer();
  return new Response(body, { status: response.status, statusText: response.statusText, headers: response.headers });
}

test('a stream its reader leaves early is in doubt', async () => {
  const generating = new OpenAI({ baseURL: FAKE_OPENAI_URL, apiKey: 'sk-fake', timeout: 10_000, fetch: stillGenerating(spy.fetch) });
  const { id, llm } = await meteredOn('left', 1_000_000, {}, generating);
  for await (const chunk of await llm.chat.completions.create({ model, max_tokens: 100, stream: true, messages: ask('leave early') })) {
    if (chunk.choices.length > 0) break;
  }
  // "leave early" is 11 characters: a prompt of 4 + 4 + 3 = 11 tokens, charged.
  assert.deepEqual(await ledger(earmark, id), [2 * 11, 8 * 100, 1]);
});

test('a stream its reader leaves after its usage came settles at that usage', async () => {
  const whole = new OpenAI({ baseURL: FAKE_OPENAI_URL, apiKey: 'sk-fake', timeout: 10_000, fetch: readWhole });
  const { id, llm } = await meteredOn('left-late', 1_000_000, {}, whole);
  for await (const chunk of await llm.chat.completions.create({ model, max_tokens: 100, stream: true, messages: ask('leave early') })) {
    if (chunk.choices.length > 0) break;
  }
  // The provider said what it billed: floor(11 / 4) + 1 = 3 prompt tokens and all 100.
  assert.deepEqual(await ledger(earmark, id), [2 * 3 + 8 * 100, 0, 0]);
});

test('a 4xx settles at nothing', async () => {
  const { id, llm } = await meteredOn('400', 1_000_000);
  const error = await llm.chat.completions.create({ model, max_tokens: 100, messages: ask('fail:400') }).catch((e) => e);
  assert.equal(error.status, 400);
  assert.deepEqual(await ledger(earmark, id), [0, 0, 0]);
});

test('a 5xx is in doubt: the prompt charged and the rest held until it is resolved', async () => {
  const once = openai.withOptions({ maxRetries: 0 });
  const { id, llm } = await meteredOn('503', 1_000_000, {}, once);
  const error = await llm.chat.completions.create({ model, max_tokens: 100, messages: ask('fail:503') }).catch((e) => e);
  assert.equal(error.status, 503);
  // "fail:503" is 8 characters: ceil(8 / 3) + 4 + 3 = 10 prompt tokens.
  assert.deepEqual(await ledger(earmark, id), [2 * 10, 8 * 100, 1]);
});

test('each of the SDK own retries takes a hold of its own', async () => {
  const { id, llm } = await meteredOn('429', 1_000_000);
  const error = await llm.chat.completions.create({ model, max_tokens: 100, messages: ask('fail:429') }).catch((e) => e);
  assert.equal(error.status, 429);
  // Three attempts (the SDK retries twice), each sent on a new hold after the one before
  // was settled at nothing.
  assert.deepEqual(spy.sent.map((r) => [r.state.used + r.state.held, r.state.openReservations]), Array(3).fill([2 * 10 + 8 * 100, 1]));
  assert.deepEqual(await ledger(earmark, id), [0, 0, 0]);
});

test('a retried 5xx leaves the failed attempt in doubt and settles the answered one at its bill', async () => {
  const twice = openai.withOptions({ maxRetries: 1 });
  const { id, llm } = await meteredOn('flaky', 1_000_000, {}, twice);
  // The fake answers "flaky" 500 the first time it sees it, then answers it.
  const reply = await llm.chat.completions.create({ model, max_tokens: 100, messages: ask('flaky') });
  assert.equal(reply.usage.completion_tokens, 100);
  // Each attempt held ceil(5 / 3) + 4 + 3 = 9 prompt tokens; the first stays in doubt with
  // its prompt charged, the second settles at floor(5 / 4) + 1 = 2 and 100.
  assert.deepEqual(await ledger(earmark, id), [2 * 9 + (2 * 2 + 8 * 100), 8 * 100, 1]);
});

test('a timeout after sending is in doubt', async () => {
  const impatient = new OpenAI({ baseURL: FAKE_OPENAI_URL, apiKey: 'sk-fake', timeout: 300, maxRetries: 0 });
  const { id, llm } = await meteredOn('timeout', 1_000_000, {}, impatient);
  const error = await llm.chat.completions.create({ model, max_tokens: 100, messages: ask('late') }).catch((e) => e);
  assert.equal(error.constructor.name, 'APIConnectionTimeoutError');
  // "late" is 4 characters: ceil(4 / 3) + 4 + 3 = 9 prompt tokens.
  assert.deepEqual(await ledger(earmark, id), [2 * 9, 8 * 100, 1]);
});

test('a connection refused before anything was sent settles at nothing', async () => {
  const probe = http.createServer();
  await new Promise((resolve) => probe.listen(0, '127.0.0.1', resolve));
  const { port } = probe.address();
  await new Promise((resolve) => probe.close(resolve));
  const nowhere = new OpenAI({ baseURL: `http://127.0.0.1:${port}/v1`, apiKey: 'sk-fake', maxRetries: 0 });
  const { id, llm } = await meteredOn('conn-refused', 1_000_000, {}, nowhere);
  const error = await llm.chat.completions.create({ model, max_tokens: 100, messages: ask('hello') }).catch((e) => e);
  assert.equal(error.constructor.name, 'APIConnectionError');
  assert.deepEqual(await ledger(earmark, id), [0, 0, 0]);
});

test('with degrade, a call the budget cannot cover is sent with the largest maximum it covers', async () => {
  // 1,030 micro-dollars: the prompt's 30, then 1,000 buy 125 output tokens, not 500.
  const { id, llm } = await meteredOn('degrade', 1_030, { degrade: true });
  const { data, response } = await llm.chat.completions.create({ model, max_tokens: 500, messages: ask(QUESTION) }).withResponse();
  assert.deepEqual([spy.sent[0].body.max_tokens, data.usage.completion_tokens, data.choices[0].finish_reason], [125, 125, 'length']);
  assert.deepEqual([response.headers.get('x-earmark-degraded'), response.headers.get('x-earmark-max-output-tokens')], ['true', '125']);
  assert.deepEqual(await ledger(earmark, id), [2 * 6 + 8 * 125, 0, 0]);
});

test('without degrade, the same call is refused unsent', async () => {
  const { id, llm } = await meteredOn('no-degrade', 1_030);
  const error = await llm.chat.completions.create({ model, max_tokens: 500, messages: ask(NEVER_SENT) }).catch((e) => e);
  assert.ok(error instanceof RefusedError, String(error));
  assert.equal(spy.sent.length, 0);
  assert.deepEqual(await ledger(earmark, id), [0, 0, 0]);
});

test('outputTokensMax lowers a larger maximum and is sent as the cap', async () => {
  const { id, llm } = await meteredOn('output-max', 1_000_000, { outputTokensMax: 200 });
  const reply = await llm.chat.completions.create({ model, max_completion_tokens: 1_000, messages: ask(QUESTION) });
  assert.deepEqual([spy.sent[0].body.max_completion_tokens, reply.usage.completion_tokens], [200, 200]);
  assert.deepEqual(atSend(), [30, 8 * 200, 1]);
  assert.deepEqual(await ledger(earmark, id), [2 * 6 + 8 * 200, 0, 0]);
});

test('the priority tier is held and settled at its own price row', async () => {
  const { id, llm } = await meteredOn('priority', 1_000_000);
  const reply = await llm.chat.completions.create({ model, max_tokens: 500, service_tier: 'priority', messages: ask(QUESTION) });
  assert.equal(reply.service_tier, 'priority');
  // The priority row's rates are twice the default's.
  assert.deepEqual(atSend(), [2 * 30, 2 * 4_000, 1]);
  assert.deepEqual(await ledger(earmark, id), [2 * (2 * 6 + 8 * 300), 0, 0]);
});

test('a copy made with withOptions is metered on the same budget', async () => {
  const { id, llm } = await meteredOn('copy', 0);
  const copy = llm.withOptions({ timeout: 5_000 });
  const error = await copy.chat.completions.create({ model, max_tokens: 500, messages: ask(NEVER_SENT) }).catch((e) => e);
  assert.ok(error instanceof RefusedError, String(error));
  assert.equal(spy.sent.length, 0);
  assert.deepEqual(await ledger(earmark, id), [0, 0, 0]);
});

test('metering a metered client again moves it to the new budget, held once', async () => {
  const first = await usdBudget(earmark, 'first', 1_000_000);
  const { id, llm } = await meteredOn('second', 1_000_000, {}, metered(openai, earmark, first));
  await llm.chat.completions.create({ model, max_tokens: 500, messages: ask(QUESTION) });
  assert.deepEqual(await ledger(earmark, first), [0, 0, 0]);
  assert.deepEqual(await ledger(earmark, id), [2 * 6 + 8 * 300, 0, 0]);
});
