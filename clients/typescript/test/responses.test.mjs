// metered() on the real `openai` client's Responses API against the fake of
// tests/fake_openai_responses.py (FAKE_OPENAI_URL): create, stream, create({ stream: true })
// and parse held, capped and settled from the response's usage or the stream's final event.
// The fake counts a prompt as its input's characters over four, plus one, and answers 300
// output tokens (at most max_output_tokens); at the test's rates a call costs exactly
// 2 * input + 8 * output (+ 10,000 a web search).
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import OpenAI from 'openai';
import { RefusedError, metered } from '../dist/esm/index.js';
import { CEILING, FAKE_OPENAI_URL, NEVER_SENT, RATES, client, estimate, ledger, putPrice, usdBudget, wireSpy } from './helpers.mjs';

const earmark = client();
const model = `gpt-ts-responses-${process.pid}`;
const spy = wireSpy(earmark);
const openai = new OpenAI({ baseURL: FAKE_OPENAI_URL, apiKey: 'sk-fake', timeout: 10_000, fetch: spy.fetch });
// 22 characters: Earmark holds ceil(22 / 3) + 4 + 3 = 15 prompt tokens; the fake bills 6.
const QUESTION = 'One line on row locks.';
const BILL = 2 * 6 + 8 * 300;
const ANSWER_FORMAT = {
  type: 'json_schema',
  name: 'answer',
  strict: true,
  schema: { type: 'object', properties: { answer: { type: 'string' } }, required: ['answer'], additionalProperties: false },
};

before(async () => {
  assert.ok(FAKE_OPENAI_URL, 'FAKE_OPENAI_URL is set by tests/clients/test_typescript.py');
  await putPrice(earmark, 'openai', model);
});
after(() => earmark.close());

async function meteredOn(name, limit) {
  const id = await usdBudget(earmark, name, limit);
  spy.watch(id);
  return { id, llm: metered(openai, earmark, id) };
}

function atSend() {
  assert.equal(spy.sent.length, 1, `one request reached the wire, not ${spy.sent.length}`);
  const { state } = spy.sent[0];
  return [state.used, state.held, state.openReservations];
}

test('responses.create is held before it is sent and settled at what the fake billed', async () => {
  const { id, llm } = await meteredOn('create', 1_000_000);
  const response = await llm.responses.create({ model, input: QUESTION, max_output_tokens: 500 });
  assert.deepEqual([response.status, response.usage.input_tokens, response.usage.output_tokens], ['completed', 6, 300]);
  assert.deepEqual(atSend(), [30, 4_000, 1]);
  assert.deepEqual(await ledger(earmark, id), [BILL, 0, 0]);
});

test('responses.stream is settled at the usage of its response.completed event', async () => {
  const { id, llm } = await meteredOn('stream-helper', 1_000_000);
  const stream = llm.responses.stream({ model, input: QUESTION, max_output_tokens: 500 });
  const final = await stream.finalResponse();
  assert.equal(final.output_text, 'tok '.repeat(300));
  assert.deepEqual(atSend(), [30, 4_000, 1]);
  assert.deepEqual(await ledger(earmark, id), [BILL, 0, 0]);
});

test('responses.create with stream: true passes every event and settles at the last', async () => {
  const { id, llm } = await meteredOn('stream', 1_000_000);
  const types = [];
  for await (const event of await llm.responses.create({ model, input: QUESTION, max_output_tokens: 500, stream: true })) {
    types.push(event.type);
  }
  assert.deepEqual([types[0], types.at(-1), types.filter((t) => t === 'response.output_text.delta').length], ['response.created', 'response.completed', 300]);
  assert.deepEqual(await ledger(earmark, id), [BILL, 0, 0]);
});

test('responses.parse is held and settled at the fake bill for its structured answer', async () => {
  const { id, llm } = await meteredOn('parse', 1_000_000);
  const response = await llm.responses.parse({ model, input: QUESTION, max_output_tokens: 500, text: { format: ANSWER_FORMAT } });
  // {"answer": "fake"}: 18 characters, 6 output tokens.
  assert.deepEqual(response.output_parsed, { answer: 'fake' });
  assert.deepEqual(atSend(), [30, 4_000, 1]);
  assert.deepEqual(await ledger(earmark, id), [2 * 6 + 8 * 6, 0, 0]);
});

test('a response without max_output_tokens is told the model ceiling and is not cut', async () => {
  const { id, llm } = await meteredOn('ceiling', 1_000_000);
  const response = await llm.responses.create({ model, input: QUESTION });
  assert.deepEqual([spy.sent[0].body.max_output_tokens, response.status, response.usage.output_tokens], [CEILING, 'completed', 300]);
  assert.deepEqual(atSend(), [30, 8 * CEILING, 1]);
  assert.deepEqual(await ledger(earmark, id), [BILL, 0, 0]);
});

test('a stream that stops at max_output_tokens settles at its response.incomplete usage', async () => {
  const { id, llm } = await meteredOn('incomplete', 1_000_000);
  const final = await llm.responses.stream({ model, input: QUESTION, max_output_tokens: 100 }).finalResponse();
  assert.deepEqual([final.status, final.usage.output_tokens], ['incomplete', 100]);
  assert.deepEqual(await ledger(earmark, id), [2 * 6 + 8 * 100, 0, 0]);
});

test('a web search tool is held for its searches and settled at those it made', async () => {
  const { id, llm } = await meteredOn('web-search', 1_000_000);
  const tools = [{ type: 'web_search' }];
  await llm.responses.create({ model, input: QUESTION, max_output_tokens: 500, tools, max_tool_calls: 2 });
  const prompt = estimate(QUESTION.length + JSON.stringify(tools).length);
  // Held for 2 searches at 10,000 each beside the answer; the fake searched none.
  assert.deepEqual(atSend(), [2 * prompt, 8 * 500 + 2 * RATES.search, 1]);
  assert.deepEqual(await ledger(earmark, id), [BILL, 0, 0]);
});

test('a web search tool without max_tool_calls is held for ten searches', async () => {
  const { id, llm } = await meteredOn('web-search-default', 1_000_000);
  await llm.responses.create({ model, input: QUESTION, max_output_tokens: 500, tools: [{ type: 'web_search_preview' }] });
  assert.equal(spy.sent[0].state.held, 8 * 500 + 10 * RATES.search);
  assert.deepEqual(await ledger(earmark, id), [BILL, 0, 0]);
});

test('a Responses stream cut before its final event is in doubt', async () => {
  const { id, llm } = await meteredOn('cut', 1_000_000);
  let deltas = 0;
  const error = await (async () => {
    for await (const event of await llm.responses.create({ model, input: 'cut', max_output_tokens: 100, stream: true })) {
      if (event.type === 'response.output_text.delta') deltas += 1;
    }
  })().catch((e) => e);
  assert.equal(deltas, 50, String(error));
  // "cut": ceil(3 / 3) + 4 + 3 = 8 prompt tokens, charged; the answer's 100 still held.
  assert.deepEqual(await ledger(earmark, id), [2 * 8, 8 * 100, 1]);
});

test('every Responses surface is refused before sending on an empty budget', async () => {
  const { id, llm } = await meteredOn('empty', 0);
  const request = { model, input: NEVER_SENT, max_output_tokens: 500 };
  const calls = {
    create: () => llm.responses.create(request),
    stream: () => llm.responses.stream(request).finalResponse(),
    streamed: () => llm.responses.create({ ...request, stream: true }),
    parse: () => llm.responses.parse({ ...request, text: { format: ANSWER_FORMAT } }),
  };
  for (const [surface, call] of Object.entries(calls)) {
    const error = await call().catch((e) => e);
    assert.ok(error instanceof RefusedError, `${surface}: ${error}`);
  }
  assert.equal(spy.sent.length, 0);
  assert.deepEqual(await ledger(earmark, id), [0, 0, 0]);
});
