// metered() on the real `@anthropic-ai/sdk` client against the fake Anthropic of
// tests/fake_anthropic.py (FAKE_ANTHROPIC_URL, and FAKE_ANTHROPIC_CACHE_URL, which reads 40
// prompt tokens from its cache and writes 100): messages.create, messages.stream and
// create({ stream: true }) held, capped and settled from the usage Anthropic reports. The
// fake counts a prompt as its characters over four, plus one (cache reads and writes not
// among its input_tokens), and answers 300 output tokens (at most max_tokens); at the
// test's rates (helpers.mjs) a message costs 2 an input token, 1 a cache read, 3 a
// five-minute cache write, 4 an hour's, 8 an output token and 10,000 a web search.
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import Anthropic from '@anthropic-ai/sdk';
import { EndpointNotMeteredError, RefusedError, metered } from '../dist/esm/index.js';
import {
  FAKE_ANTHROPIC_CACHE_URL,
  FAKE_ANTHROPIC_URL,
  NEVER_SENT,
  RATES,
  client,
  estimate,
  ledger,
  putPrice,
  usdBudget,
  wireSpy,
} from './helpers.mjs';

const earmark = client();
const model = `claude-ts-${process.pid}`;
const spy = wireSpy(earmark);
const anthropic = new Anthropic({ baseURL: FAKE_ANTHROPIC_URL, apiKey: 'sk-fake', timeout: 10_000, fetch: spy.fetch });
const ask = (content) => [{ role: 'user', content }];
// 22 characters: Earmark holds ceil(22 / 3) + 4 + 3 = 15 prompt tokens; the fake bills 6.
const QUESTION = 'One line on row locks.';
const BILL = 2 * 6 + 8 * 300;
// 800 characters, kept in the cache: the fake bills floor(800 / 4) + 1 = 201 prompt tokens,
// 40 read from the cache, 100 written to it and 61 plain input; Earmark holds
// ceil(800 / 3) + 4 + 3 = 274.
const LONG = 'x'.repeat(800);

before(async () => {
  assert.ok(FAKE_ANTHROPIC_URL, 'FAKE_ANTHROPIC_URL is set by tests/clients/test_typescript.py');
  await putPrice(earmark, 'anthropic', model);
});
after(() => earmark.close());

async function meteredOn(name, limit, options = {}, client = anthropic) {
  const id = await usdBudget(earmark, name, limit);
  spy.watch(id);
  return { id, llm: metered(client, earmark, id, options) };
}

function atSend() {
  assert.equal(spy.sent.length, 1, `one request reached the wire, not ${spy.sent.length}`);
  const { state } = spy.sent[0];
  return [state.used, state.held, state.openReservations];
}

test('metered() answers a client of the Anthropic class itself', async () => {
  const { llm } = await meteredOn('class', 1_000_000);
  assert.ok(llm instanceof Anthropic);
  assert.ok(llm.withOptions({ timeout: 5_000 }) instanceof Anthropic);
});

test('messages.create is held before it is sent and settled at what the fake billed', async () => {
  const { id, llm } = await meteredOn('create', 1_000_000);
  const message = await llm.messages.create({ model, max_tokens: 500, messages: ask(QUESTION) });
  assert.deepEqual([message.usage.input_tokens, message.usage.output_tokens], [6, 300]);
  assert.deepEqual(atSend(), [30, 4_000, 1]);
  assert.deepEqual(await ledger(earmark, id), [BILL, 0, 0]);
});

test('messages.stream is settled at message_delta cumulative usage', async () => {
  const { id, llm } = await meteredOn('stream-helper', 1_000_000);
  const message = await llm.messages.stream({ model, max_tokens: 500, messages: ask(QUESTION) }).finalMessage();
  assert.equal(message.content[0].text, 'tok '.repeat(300));
  assert.deepEqual(atSend(), [30, 4_000, 1]);
  assert.deepEqual(await ledger(earmark, id), [BILL, 0, 0]);
});

test('messages.create with stream: true passes every event and settles at the bill', async () => {
  const { id, llm } = await meteredOn('stream', 1_000_000);
  const types = [];
  for await (const event of await llm.messages.create({ model, max_tokens: 500, stream: true, messages: ask(QUESTION) })) {
    types.push(event.type);
  }
  assert.deepEqual([types[0], types.at(-2), types.at(-1)], ['message_start', 'message_delta', 'message_stop']);
  assert.deepEqual(await ledger(earmark, id), [BILL, 0, 0]);
});

test('withResponse() is metered and names the hold', async () => {
  const { id, llm } = await meteredOn('raw', 1_000_000);
  const { data, response } = await llm.messages.create({ model, max_tokens: 500, messages: ask(QUESTION) }).withResponse();
  assert.equal(data.usage.output_tokens, 300);
  assert.equal(response.headers.get('x-earmark-max-output-tokens'), '500');
  assert.deepEqual(await ledger(earmark, id), [BILL, 0, 0]);
});

test('every messages surface is refused before sending on an empty budget', async () => {
  const { id, llm } = await meteredOn('empty', 0);
  const request = { model, max_tokens: 500, messages: ask(NEVER_SENT) };
  const calls = {
    create: () => llm.messages.create(request),
    streamed: () => llm.messages.create({ ...request, stream: true }),
    stream: () => llm.messages.stream(request).finalMessage(),
  };
  for (const [surface, call] of Object.entries(calls)) {
    const error = await call().catch((e) => e);
    assert.ok(error instanceof RefusedError, `${surface}: ${error}`);
  }
  assert.equal(spy.sent.length, 0);
  assert.deepEqual(await ledger(earmark, id), [0, 0, 0]);
});

test('counting tokens and listing models pass through without a hold', async () => {
  const { id, llm } = await meteredOn('free', 1_000_000);
  const counted = await llm.messages.countTokens({ model, messages: ask(QUESTION) });
  const listed = await llm.models.list().catch((e) => e);
  assert.deepEqual([counted.input_tokens, listed.status], [6, 404]);
  assert.deepEqual(spy.sent.map((r) => `${r.method} ${r.path} ${r.state.openReservations}`), [
    'POST /v1/messages/count_tokens 0',
    'GET /v1/models 0',
  ]);
  assert.deepEqual(await ledger(earmark, id), [0, 0, 0]);
});

test('message batches bill and cannot be priced: refused unsent, naming the endpoint', async () => {
  const { llm } = await meteredOn('batches', 1_000_000);
  const params = { model, max_tokens: 10, messages: ask(NEVER_SENT) };
  const error = await llm.messages.batches.create({ requests: [{ custom_id: 'a', params }] }).catch((e) => e);
  assert.ok(error instanceof EndpointNotMeteredError, String(error));
  assert.equal(error.about.endpoint, 'POST /v1/messages/batches');
  assert.equal(spy.sent.length, 0);
});

test('a web search is held per search and priced at its fee', async () => {
  const { id, llm } = await meteredOn('web-search', 1_000_000);
  const tools = [{ type: 'web_search_20250305', name: 'web_search', max_uses: 2 }];
  const message = await llm.messages.create({ model, max_tokens: 500, tools, messages: ask('find row locks') });
  // The fake searches once for {"query": "find row locks"} (27 characters, 9 output tokens)
  // and reads 500 tokens of results as input: 4 + 500 in, 9 + 300 out.
  assert.deepEqual([message.usage.input_tokens, message.usage.output_tokens, message.usage.server_tool_use.web_search_requests], [504, 309, 1]);
  const prompt = estimate('find row locks'.length + JSON.stringify(tools).length);
  assert.deepEqual(atSend(), [2 * prompt, 8 * 500 + 2 * RATES.search, 1]);
  assert.deepEqual(await ledger(earmark, id), [2 * 504 + 8 * 309 + RATES.search, 0, 0]);
});

test('a streamed web search settles at message_delta usage, which counts the results', async () => {
  const { id, llm } = await meteredOn('web-search-stream', 1_000_000);
  const tools = [{ type: 'web_search_20250305', name: 'web_search', max_uses: 2 }];
  const message = await llm.messages.stream({ model, max_tokens: 500, tools, messages: ask('find row locks') }).finalMessage();
  assert.equal(message.usage.input_tokens, 504);
  assert.deepEqual(await ledger(earmark, id), [2 * 504 + 8 * 309 + RATES.search, 0, 0]);
});

test('one-hour cache writes are priced at their own rate, five-minute ones at the write rate', async () => {
  assert.ok(FAKE_ANTHROPIC_CACHE_URL, 'FAKE_ANTHROPIC_CACHE_URL is set by tests/clients/test_typescript.py');
  const caching = new Anthropic({ baseURL: FAKE_ANTHROPIC_CACHE_URL, apiKey: 'sk-fake', timeout: 10_000, fetch: spy.fetch });
  const block = (ttl) => [{ type: 'text', text: LONG, cache_control: ttl ? { type: 'ephemeral', ttl } : { type: 'ephemeral' } }];
  const { id, llm } = await meteredOn('cache-1h', 1_000_000, {}, caching);
  const message = await llm.messages.create({ model, max_tokens: 500, messages: ask(block('1h')) });
  assert.deepEqual(
    [message.usage.input_tokens, message.usage.cache_read_input_tokens, message.usage.cache_creation.ephemeral_1h_input_tokens],
    [61, 40, 100],
  );
  assert.deepEqual(atSend(), [2 * 274, 8 * 500, 1]);
  assert.deepEqual(await ledger(earmark, id), [2 * 61 + 1 * 40 + 4 * 100 + 8 * 300, 0, 0]);
  const short = await meteredOn('cache-5m', 1_000_000, {}, caching);
  await short.llm.messages.create({ model, max_tokens: 500, messages: ask(block(null)) });
  assert.deepEqual(await ledger(earmark, short.id), [2 * 61 + 1 * 40 + 3 * 100 + 8 * 300, 0, 0]);
  const streamed = await meteredOn('cache-1h-stream', 1_000_000, {}, caching);
  await streamed.llm.messages.stream({ model, max_tokens: 500, messages: ask(block('1h')) }).finalMessage();
  assert.deepEqual(await ledger(earmark, streamed.id), [2 * 61 + 1 * 40 + 4 * 100 + 8 * 300, 0, 0]);
});

test('a stream cut before message_delta is in doubt', async () => {
  const { id, llm } = await meteredOn('cut', 1_000_000);
  let deltas = 0;
  const error = await (async () => {
    for await (const event of await llm.messages.create({ model, max_tokens: 100, stream: true, messages: ask('cut') })) {
      if (event.type === 'content_block_delta') deltas += 1;
    }
  })().catch((e) => e);
  assert.equal(deltas, 50, String(error));
  // "cut": ceil(3 / 3) + 4 + 3 = 8 prompt tokens, charged; the answer's 100 still held.
  assert.deepEqual(await ledger(earmark, id), [2 * 8, 8 * 100, 1]);
});

test('outputTokensMax lowers a large max_tokens, and the provider is told it', async () => {
  const { id, llm } = await meteredOn('output-max', 1_000_000, { outputTokensMax: 200 });
  const message = await llm.messages.create({ model, max_tokens: 4_000, messages: ask(QUESTION) });
  assert.deepEqual([spy.sent[0].body.max_tokens, message.usage.output_tokens, message.stop_reason], [200, 200, 'max_tokens']);
  assert.deepEqual(await ledger(earmark, id), [2 * 6 + 8 * 200, 0, 0]);
});

test('a 4xx settles at nothing and a 5xx is in doubt', async () => {
  const once = anthropic.withOptions({ maxRetries: 0 });
  const { id, llm } = await meteredOn('errors', 1_000_000, {}, once);
  const rejected = await llm.messages.create({ model, max_tokens: 100, messages: ask('fail:400') }).catch((e) => e);
  assert.equal(rejected.status, 400);
  assert.deepEqual(await ledger(earmark, id), [0, 0, 0]);
  const overloaded = await llm.messages.create({ model, max_tokens: 100, messages: ask('fail:529') }).catch((e) => e);
  assert.equal(overloaded.status, 529);
  // "fail:529": ceil(8 / 3) + 4 + 3 = 10 prompt tokens, charged; the answer's 100 held.
  assert.deepEqual(await ledger(earmark, id), [2 * 10, 8 * 100, 1]);
});
