// Background responses through a metered OpenAI client (the Python SDK's
// tests/client/test_background.py, for Node): the hold stays open while the response runs
// at the provider, renewing, its id recorded on it (label openai.response_id), and settles
// once at the response's bill when a retrieve, a resumed stream or a cancel through the same
// client says it ended; an answer that is not the response's, or not in its published
// shape, settles nothing; the Earmark client's close() leaves a hold still open in doubt with
// its id. Against the fake OpenAI of tests/fake_openai_responses.py (FAKE_OPENAI_URL), whose
// background responses run until cancelled, and a stand-in on 127.0.0.1 for the answers the
// fake does not give (a response that completes, a stream cut short, answers out of shape).
import assert from 'node:assert/strict';
import http from 'node:http';
import { after, before, test } from 'node:test';
import OpenAI from 'openai';
import { metered, wire } from '../dist/esm/index.js';
import { InvalidResponseError, RESPONSE_ID_LABEL, billedNothing, ending, validId } from '../dist/esm/openai-background.js';
import { FAKE_OPENAI_URL, client, eventually, holdsOf, ledger, putPrice, usdBudget } from './helpers.mjs';

const earmark = client();
const model = `gpt-ts-background-${process.pid}`;
const openai = new OpenAI({ baseURL: FAKE_OPENAI_URL, apiKey: 'sk-fake', timeout: 10_000, maxRetries: 0 });
// 22 characters: the fake bills 6 prompt tokens and 300 output tokens, 2 * 6 + 8 * 300.
const QUESTION = 'One line on row locks.';
const BILL = 2 * 6 + 8 * 300;
const { RESERVATION_STATE_HELD: HELD, RESERVATION_STATE_SETTLED: SETTLED, RESERVATION_STATE_IN_DOUBT: IN_DOUBT } = wire.ReservationState;
// What the stand-in's responses report when they end: 2 * 10 + 8 * 5 at the test's rates.
const USAGE = { input_tokens: 10, output_tokens: 5 };
const USAGE_BILL = 2 * 10 + 8 * 5;

before(async () => {
  assert.ok(FAKE_OPENAI_URL, 'FAKE_OPENAI_URL is set by tests/clients/test_typescript.py');
  await putPrice(earmark, 'openai', model);
});
after(() => earmark.close());

const ask = (fields = {}) => ({ model, input: QUESTION, max_output_tokens: 500, background: true, ...fields });

async function meteredOn(name, options = {}, provider = openai) {
  const id = await usdBudget(earmark, name, 1_000_000);
  return { id, llm: metered(provider, earmark, id, options) };
}

async function labelled(id, responseId) {
  await eventually(async () => (await holdsOf(id))[0]?.labels[RESPONSE_ID_LABEL] === responseId, 'the response id on the hold');
}

/** A Response of the stand-in's, in status, with usage. */
function response(id, status, usage = null, fields = {}) {
  return { id, object: 'response', created_at: Math.floor(Date.now() / 1000), status, background: true, model, output: [], usage, ...fields };
}

const json = (value) => (answer) => {
  answer.writeHead(200, { 'content-type': 'application/json' });
  answer.end(JSON.stringify(value));
};

/** A stream of events; cut: the connection dropped after them, before the stream's end. */
const events = (list, { cut = false } = {}) => (answer) => {
  answer.writeHead(200, { 'content-type': 'text/event-stream' });
  for (const event of list) answer.write(`event: ${event.type}\ndata: ${JSON.stringify(event)}\n\n`);
  if (cut) setTimeout(() => answer.socket.destroy(), 50);
  else answer.end();
};

/** A stand-in OpenAI on 127.0.0.1 that answers each request with the next answer queued for
 * its method and path (404 past them). */
async function standIn() {
  const queued = new Map();
  const server = http.createServer((request, answer) => {
    request.resume();
    request.on('end', () => {
      const next = queued.get(`${request.method} ${new URL(request.url, 'http://x').pathname}`)?.shift();
      if (next !== undefined) return next(answer);
      answer.writeHead(404, { 'content-type': 'application/json' });
      answer.end('{"error": {"message": "nothing queued", "type": "invalid_request_error"}}');
    });
  });
  await new Promise((resolve) => server.listen(0, '127.0.0.1', resolve));
  return {
    url: `http://127.0.0.1:${server.address().port}/v1`,
    queue: (key, ...answers) => queued.set(key, [...(queued.get(key) ?? []), ...answers]),
    close: () => server.close(),
  };
}

test('a Response is read as running, ended with its usage, or out of its published shape', () => {
  const ended = ending(response('r', 'completed', { ...USAGE, input_tokens_details: { cached_tokens: 4 } }), 'r');
  assert.deepEqual([ending(response('r', 'queued'), 'r'), ending(response('r', 'in_progress'), 'r')], [null, null]);
  assert.deepEqual([ended.status, ended.usage.inputTokens, ended.usage.outputTokens, ended.usage.cachedInputTokens], ['completed', 10, 5, 4]);
  assert.deepEqual([billedNothing(ending(response('r', 'cancelled'), 'r')), ending(response('r', 'failed'), 'r')], [true, { status: 'failed', usage: null }]);
  const fields = [
    [null, 'object'],
    [{ ...response('r', 'completed', USAGE), object: 'list' }, 'object'],
    [response('other', 'completed', USAGE), 'id'],
    [response('r', 'finished', USAGE), 'status'],
    [response('r', 'completed'), 'usage'],
    [response('r', 'incomplete'), 'usage'],
    [response('r', 'completed', 'lots'), 'usage'],
    [response('r', 'completed', { input_tokens: 10 }), 'usage'],
    [response('r', 'completed', { input_tokens: 10, output_tokens: -1 }), 'usage.output_tokens'],
    [response('r', 'completed', { input_tokens: 1.5, output_tokens: 1 }), 'usage.input_tokens'],
    [response('r', 'completed', { input_tokens: 10, output_tokens: 1, input_tokens_details: { cached_tokens: 8, cache_write_tokens: 4 } }), 'usage.input_tokens_details'],
  ].map(([answer]) => {
    try {
      ending(answer, 'r');
      return 'read';
    } catch (error) {
      return error instanceof InvalidResponseError ? error.field : String(error);
    }
  });
  assert.deepEqual(fields, ['object', 'object', 'id', 'status', 'usage', 'usage', 'usage', 'usage', 'usage.output_tokens', 'usage.input_tokens', 'usage.input_tokens_details']);
  assert.deepEqual(['resp_1', '', 'r'.repeat(257), 'resp\n1', 7].map(validId), [true, false, false, false, false]);
});

test('a background response keeps its hold open, labelled and renewing, while read running; a cancel settles it at nothing', async () => {
  const { id, llm } = await meteredOn('bg-cancel', { leaseSeconds: 3 });
  const created = await llm.responses.create(ask());
  await labelled(id, created.id);
  const first = (await holdsOf(id))[0].expiresAt.getTime();
  await eventually(async () => (await holdsOf(id))[0].expiresAt.getTime() > first, 'a renewal of the open hold');
  const running = await llm.responses.retrieve(created.id);
  // A resumed stream of a running response opens it and ends, the response still running.
  const resumed = [];
  for await (const event of await llm.responses.retrieve(created.id, { stream: true })) resumed.push(event.type);
  await earmark.flush();
  const [open] = await holdsOf(id);
  const cancelled = await llm.responses.cancel(created.id);
  await earmark.flush();
  const [hold] = await holdsOf(id);
  assert.deepEqual([created.status, running.status, resumed, cancelled.status], ['queued', 'in_progress', ['response.created', 'response.in_progress'], 'cancelled']);
  assert.equal(open.state, HELD);
  assert.deepEqual([hold.state, hold.settledUsed, hold.labels[RESPONSE_ID_LABEL]], [SETTLED, 0n, created.id]);
  assert.deepEqual(await ledger(earmark, id), [0, 0, 0]);
});

test("a retrieve of another client's response settles nothing; close() leaves the open hold in doubt with its id", async () => {
  const own = client();
  const id = await usdBudget(earmark, 'bg-close', 1_000_000);
  const llm = metered(openai, own, id);
  const ours = await llm.responses.create(ask());
  const theirs = await openai.responses.create(ask({ input: 'theirs' }));
  const retrieved = await llm.responses.retrieve(theirs.id);
  const cancelled = await llm.responses.cancel(theirs.id);
  await labelled(id, ours.id);
  const [open] = await holdsOf(id);
  await own.close();
  const [hold] = await holdsOf(id);
  await openai.responses.cancel(ours.id);
  assert.deepEqual([retrieved.status, cancelled.status, open.state], ['in_progress', 'cancelled', HELD]);
  assert.deepEqual([hold.state, hold.labels[RESPONSE_ID_LABEL]], [IN_DOUBT, ours.id]);
  assert.ok(hold.charged > 0n && hold.charged < hold.amount, `charged ${hold.charged} of ${hold.amount}`);
});

test('a streamed background create read to its end settles at its final event', async () => {
  const { id, llm } = await meteredOn('bg-stream');
  const stream = await llm.responses.create(ask({ stream: true }));
  let last;
  for await (const event of stream) last = event;
  assert.deepEqual([last.type, last.response.background], ['response.completed', true]);
  assert.deepEqual(await ledger(earmark, id), [BILL, 0, 0]);
});

test("answers that are not the response's own settle nothing; the retrieve that says it completed settles at its usage, once", async () => {
  const fake = await standIn();
  after(() => fake.close());
  const { id, llm } = await meteredOn('bg-checked', {}, new OpenAI({ baseURL: fake.url, apiKey: 'k', maxRetries: 0 }));
  fake.queue('POST /v1/responses', json(response('resp_x', 'queued')));
  const unread = [
    response('resp_other', 'completed', USAGE),
    response('resp_x', 'completed'),
    response('resp_x', 'completed', { input_tokens: 10, output_tokens: -1 }),
    response('resp_x', 'finished', USAGE),
    { ...response('resp_x', 'completed', USAGE), object: 'list' },
    response('resp_x', 'in_progress'),
  ];
  fake.queue('GET /v1/responses/resp_x', ...unread.map(json), json(response('resp_x', 'completed', USAGE)), json(response('resp_x', 'completed', USAGE)));
  await llm.responses.create(ask());
  const open = [];
  for (const _ of unread) {
    await llm.responses.retrieve('resp_x');
    await earmark.flush();
    open.push((await ledger(earmark, id))[2]);
  }
  const completed = await llm.responses.retrieve('resp_x');
  await earmark.flush();
  const settled = await ledger(earmark, id);
  await llm.responses.retrieve('resp_x');
  await earmark.flush();
  assert.deepEqual(open, unread.map(() => 1));
  assert.deepEqual([completed.status, settled, await ledger(earmark, id)], ['completed', [USAGE_BILL, 0, 0], [USAGE_BILL, 0, 0]]);
});

test("a background stream cut before its final event keeps the hold open; the resumed stream's final event settles it", async () => {
  const fake = await standIn();
  after(() => fake.close());
  const { id, llm } = await meteredOn('bg-resumed', {}, new OpenAI({ baseURL: fake.url, apiKey: 'k', maxRetries: 0 }));
  const created = { type: 'response.created', sequence_number: 0, response: response('resp_s', 'queued') };
  fake.queue('POST /v1/responses', events([created], { cut: true }));
  fake.queue(
    'GET /v1/responses/resp_s',
    events([
      { type: 'response.in_progress', sequence_number: 1, response: response('resp_s', 'in_progress') },
      { type: 'response.completed', sequence_number: 2, response: response('resp_s', 'completed', USAGE) },
    ]),
  );
  const stream = await llm.responses.create(ask({ stream: true }));
  const seen = [];
  const cut = await (async () => {
    for await (const event of stream) seen.push(event.type);
  })().then(() => null, (error) => error);
  await labelled(id, 'resp_s');
  const open = await ledger(earmark, id);
  const resumed = [];
  for await (const event of await llm.responses.retrieve('resp_s', { stream: true, starting_after: 0 })) resumed.push(event.type);
  await earmark.flush();
  assert.ok(cut instanceof Error, 'the stream was cut');
  assert.deepEqual([seen, open[2], resumed], [['response.created'], 1, ['response.in_progress', 'response.completed']]);
  assert.deepEqual(await ledger(earmark, id), [USAGE_BILL, 0, 0]);
});
