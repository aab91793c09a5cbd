// metered() on @google/genai's GoogleGenAI against an in-process fake Gemini API
// (test/fakes.mjs) that answers as Google publishes generateContent and
// streamGenerateContent (?alt=sse, CRLF-framed events with a partial usageMetadata first and
// the whole one on the last, which has the finishReason). The fake bills 40 prompt tokens,
// 10 of them cached content, 20 candidate tokens and 30 thinking tokens: at the test's rates
// (helpers.mjs) 2 * (40 - 10) + 1 * 10 + 8 * (20 + 30) = 470 micro-dollars, the thinking at
// the output rate.
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { GoogleGenAI } from '@google/genai';
import { EndpointNotMeteredError, RefusedError, SocketNotMeteredError, metered } from '../dist/esm/index.js';
import { json, serve, sse } from './fakes.mjs';
import { CEILING, NEVER_SENT, client, ledger, putPrice, usdBudget, wireSpy } from './helpers.mjs';

const earmark = client();
const model = `gemini-ts-${process.pid}`;
const spy = wireSpy(earmark);
const USAGE = { promptTokenCount: 40, cachedContentTokenCount: 10, candidatesTokenCount: 20, thoughtsTokenCount: 30, totalTokenCount: 90 };
const BILL = 2 * (40 - 10) + 1 * 10 + 8 * (20 + 30);
// 22 characters: Earmark holds ceil(22 / 3) + 4 + 3 = 15 prompt tokens.
const QUESTION = 'One line on row locks.';
let fake;

function answer(text, usage, finishReason) {
  const candidate = { content: { parts: [{ text }], role: 'model' }, index: 0, ...(finishReason ? { finishReason } : {}) };
  return { candidates: [candidate], usageMetadata: usage, modelVersion: model, responseId: 'r1' };
}

before(async () => {
  fake = await serve((req, res) => {
    if (req.headers['x-goog-api-key'] !== 'gemini-key') return json(res, 403, { error: { code: 403, message: 'no key', status: 'PERMISSION_DENIED' } });
    const found = /^\/v1beta1?\/(?:publishers\/google\/)?models\/([^/:]+):(\w+)$/.exec(req.url.pathname);
    const body = JSON.parse(req.body || '{}');
    if (found?.[2] === 'countTokens') return json(res, 200, { totalTokens: 10 });
    if (found?.[2] === 'generateContent') return json(res, 200, answer('Row locks.', USAGE, 'STOP'));
    if (found?.[2] === 'streamGenerateContent' && req.url.searchParams.get('alt') === 'sse') {
      const cut = JSON.stringify(body.contents).includes('cut');
      const events = [answer('Row \u2028', { promptTokenCount: 40, totalTokenCount: 40 }), answer('locks.', USAGE, 'STOP')];
      return sse(res, cut ? events.slice(0, 1) : events, { lineEnd: '\r\n', cut });
    }
    return json(res, 404, { error: { code: 404, message: 'not found', status: 'NOT_FOUND' } });
  });
  await putPrice(earmark, 'google', model);
});
after(async () => {
  earmark.close();
  await fake.close();
});

async function meteredOn(name, limit, vertexai = false) {
  const id = await usdBudget(earmark, name, limit);
  spy.watch(id);
  fake.requests.length = 0;
  const ai = new GoogleGenAI({ vertexai, apiKey: 'gemini-key', httpOptions: { baseUrl: fake.url, fetch: spy.fetch } });
  return { id, ai, llm: metered(ai, earmark, id) };
}

function atSend() {
  assert.equal(spy.sent.length, 1, `one request reached the wire, not ${spy.sent.length}`);
  const { state } = spy.sent[0];
  return [state.used, state.held, state.openReservations];
}

test('generateContent is held before it is sent and settled at the bill, thinking as output', async () => {
  const { id, ai, llm } = await meteredOn('gemini-generate', 1_000_000);
  assert.equal(llm, ai, 'a GoogleGenAI is metered in place');
  const reply = await llm.models.generateContent({ model, contents: QUESTION, config: { maxOutputTokens: 500, thinkingConfig: { thinkingBudget: 50 } } });
  assert.equal(reply.usageMetadata.thoughtsTokenCount, 30);
  // Held 2 * 15 + 8 * 500, of which the prompt's 30 was charged by the Reserve.
  assert.deepEqual(atSend(), [30, 8 * 500, 1]);
  assert.equal(spy.sent[0].body.generationConfig.maxOutputTokens, 500);
  assert.deepEqual(await ledger(earmark, id), [BILL, 0, 0]);
});

test('a call with no maximum is told the model ceiling', async () => {
  const { id, llm } = await meteredOn('gemini-ceiling', 1_000_000);
  await llm.models.generateContent({ model, contents: QUESTION });
  assert.deepEqual(atSend(), [30, 8 * CEILING, 1]);
  assert.equal(spy.sent[0].body.generationConfig.maxOutputTokens, CEILING);
  assert.deepEqual(await ledger(earmark, id), [BILL, 0, 0]);
});

test('a stream is settled at its last usageMetadata, not a sum', async () => {
  const { id, llm } = await meteredOn('gemini-stream', 1_000_000);
  let text = '';
  for await (const chunk of await llm.models.generateContentStream({ model, contents: QUESTION, config: { maxOutputTokens: 500 } })) text += chunk.text;
  assert.equal(text, 'Row \u2028locks.');
  assert.deepEqual(atSend(), [30, 8 * 500, 1]);
  assert.deepEqual(await ledger(earmark, id), [BILL, 0, 0]);
});

test('a stream dropped before its last chunk is in doubt', async () => {
  const { id, llm } = await meteredOn('gemini-cut', 1_000_000);
  const error = await (async () => {
    for await (const _ of await llm.models.generateContentStream({ model, contents: 'cut', config: { maxOutputTokens: 100 } }));
  })().catch((e) => e);
  assert.ok(error instanceof Error);
  // "cut": ceil(3 / 3) + 4 + 3 = 8 prompt tokens, charged; the answer's 100 still held.
  assert.deepEqual(await ledger(earmark, id), [2 * 8, 8 * 100, 1]);
});

test('every surface is refused before sending on an empty budget', async () => {
  const { id, llm } = await meteredOn('gemini-empty', 0);
  const calls = {
    generate: () => llm.models.generateContent({ model, contents: NEVER_SENT }),
    stream: () => llm.models.generateContentStream({ model, contents: NEVER_SENT }),
    chat: () => llm.chats.create({ model }).sendMessage({ message: NEVER_SENT }),
  };
  for (const [surface, call] of Object.entries(calls)) {
    const error = await call().catch((e) => e);
    assert.ok(error instanceof RefusedError, `${surface}: ${error}`);
  }
  assert.deepEqual([spy.sent.length, fake.requests.length], [0, 0]);
  assert.deepEqual(await ledger(earmark, id), [0, 0, 0]);
});

test('counting tokens passes free; embeddings and the live API are refused unsent', async () => {
  const { id, llm } = await meteredOn('gemini-other', 1_000_000);
  assert.equal((await llm.models.countTokens({ model, contents: QUESTION })).totalTokens, 10);
  const embedded = await llm.models.embedContent({ model, contents: NEVER_SENT }).catch((e) => e);
  assert.ok(embedded instanceof EndpointNotMeteredError, String(embedded));
  assert.throws(() => llm.live.connect({ model }), SocketNotMeteredError);
  assert.deepEqual(fake.requests.map((r) => r.url.pathname), [`/v1beta/models/${model}:countTokens`]);
  assert.deepEqual(await ledger(earmark, id), [0, 0, 0]);
});

test('Vertex AI (express mode) is metered by the same routes', async () => {
  const { id, llm } = await meteredOn('gemini-vertex', 1_000_000, true);
  await llm.models.generateContent({ model, contents: QUESTION, config: { maxOutputTokens: 500 } });
  assert.equal(spy.sent[0].path, `/v1beta1/publishers/google/models/${model}:generateContent`);
  assert.deepEqual(atSend(), [30, 8 * 500, 1]);
  assert.deepEqual(await ledger(earmark, id), [BILL, 0, 0]);
});

test('the SDK surfaces Earmark has no price for are refused unsent', async () => {
  const { id, llm } = await meteredOn('gemini-refused', 1_000_000);
  const calls = {
    generateVideos: () => llm.models.generateVideos({ model, prompt: NEVER_SENT }),
    caches: () => llm.caches.create({ model, config: { contents: NEVER_SENT } }),
    batches: () => llm.batches.create({ model, src: [{ contents: [{ parts: [{ text: NEVER_SENT }], role: 'user' }] }] }),
    interactions: () => llm.interactions.create({ model, input: NEVER_SENT }),
  };
  const errors = [];
  for (const [surface, call] of Object.entries(calls)) {
    const error = await call().catch((e) => e);
    // The NextGen surfaces (interactions, agents...) wrap what their fetch throws twice, in
    // an APIConnectionError of their own whose cause's cause is the Earmark error.
    const refusal = surface === 'interactions' ? error?.cause?.cause : error;
    if (!(refusal instanceof EndpointNotMeteredError)) errors.push(`${surface}: ${error}`);
  }
  assert.deepEqual(errors, []);
  assert.deepEqual([spy.sent.length, fake.requests.length], [0, 0]);
  assert.deepEqual(await ledger(earmark, id), [0, 0, 0]);
});
