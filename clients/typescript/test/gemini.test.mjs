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
import { EndpointNotMeteredError, PriceNotFoundError, RefusedError, SocketNotMeteredError, metered } from '../dist/esm/index.js';
import { json, serve, sse } from './fakes.mjs';
import { CEILING, NEVER_SENT, client, estimate, ledger, putPrice, usdBudget, wireSpy } from './helpers.mjs';

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
    const asked = JSON.stringify(body.contents ?? null);
    if (found?.[2] === 'countTokens') return json(res, 200, { totalTokens: 10 });
    if (found?.[2] === 'generateContent' && asked.includes('count:')) {
      // A count out of shape, as the prompt names it: "count:string", "count:fraction"...
      const bad = { string: '20', fraction: 20.5, boolean: true, negative: -1, past: 10 ** 12 + 1 }[/count:(\w+)/.exec(asked)[1]];
      return json(res, 200, answer('Row locks.', { ...USAGE, candidatesTokenCount: bad }, 'STOP'));
    }
    if (found?.[2] === 'generateContent') {
      // The tier the call ran at, as the prompt names it ("traffic:ON_DEMAND_PRIORITY").
      const traffic = /traffic:(\w+)/.exec(asked)?.[1];
      return json(res, 200, answer('Row locks.', traffic ? { ...USAGE, trafficType: traffic } : USAGE, 'STOP'));
    }
    if (found?.[2] === 'streamGenerateContent' && asked.includes('two')) {
      // Two candidates, the first finishing before the second; "two-cut" is cut before the
      // second finishes.
      const both = (parts, usage) => ({ candidates: parts, usageMetadata: usage, modelVersion: model, responseId: 'r2' });
      const part = (index, text, finishReason) => ({ content: { parts: [{ text }], role: 'model' }, index, ...(finishReason ? { finishReason } : {}) });
      const events = [
        both([part(0, 'Row '), part(1, 'Locks ')], { promptTokenCount: 40, totalTokenCount: 40 }),
        both([part(0, 'locks.', 'STOP')], { ...USAGE, candidatesTokenCount: 10 }),
        both([part(1, 'hold.', 'STOP')], USAGE),
      ];
      const cut = asked.includes('two-cut');
      return sse(res, cut ? events.slice(0, 2) : events, { lineEnd: '\r\n', cut });
    }
    if (found?.[2] === 'streamGenerateContent' && req.url.searchParams.get('alt') === 'sse') {
      const cut = asked.includes('cut');
      const events = [answer('Row \u2028', { promptTokenCount: 40, totalTokenCount: 40 }), answer('locks.', USAGE, 'STOP')];
      return sse(res, cut ? events.slice(0, 1) : events, { lineEnd: '\r\n', cut });
    }
    return json(res, 404, { error: { code: 404, message: 'not found', status: 'NOT_FOUND' } });
  });
  await putPrice(earmark, 'google', model);
  await putPrice(earmark, 'google', model, { tier: 'priority', scale: 2 });
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

test('a PATCH (caches.update, extending a cache billed by the hour) is refused unsent; a delete passes', async () => {
  const { id, llm } = await meteredOn('gemini-patch', 1_000_000);
  const error = await llm.caches.update({ name: 'cachedContents/c1', config: { ttl: '86400s' } }).catch((e) => e);
  assert.ok(error instanceof EndpointNotMeteredError, String(error));
  assert.match(error.message, /PATCH \/v1beta\/cachedContents\/c1/);
  assert.equal(fake.requests.length, 0);
  // The fake knows no cache: its 404 says the delete was sent.
  await llm.caches.delete({ name: 'cachedContents/c1' }).catch(() => undefined);
  assert.deepEqual(fake.requests.map((r) => r.method), ['DELETE']);
  assert.deepEqual(await ledger(earmark, id), [0, 0, 0]);
});

test('the priority tier is held at its price row and settled at the tier trafficType names; flex, unpriced, is refused unsent', async () => {
  const { id, llm } = await meteredOn('gemini-tier', 1_000_000);
  await llm.models.generateContent({ model, contents: QUESTION, config: { maxOutputTokens: 500, serviceTier: 'priority' } });
  assert.equal(spy.sent[0].body.serviceTier, 'priority');
  // The priority row's rates are twice the default's.
  assert.deepEqual(atSend(), [2 * 30, 2 * 8 * 500, 1]);
  await llm.models.generateContent({ model, contents: 'traffic:ON_DEMAND_PRIORITY', config: { maxOutputTokens: 500, serviceTier: 'priority' } });
  // Asked for priority, served on demand: charged at the default rates.
  await llm.models.generateContent({ model, contents: 'traffic:ON_DEMAND', config: { maxOutputTokens: 500, serviceTier: 'priority' } });
  const flex = await llm.models.generateContent({ model, contents: NEVER_SENT, config: { maxOutputTokens: 500, serviceTier: 'flex' } }).catch((e) => e);
  assert.ok(flex instanceof PriceNotFoundError, String(flex));
  assert.equal(spy.sent.length, 3);
  assert.deepEqual(await ledger(earmark, id), [2 * BILL + 2 * BILL + BILL, 0, 0]);
});

test('a stream of two candidates ends when both have finished; cut while one runs it is in doubt', async () => {
  const { id, llm } = await meteredOn('gemini-two', 1_000_000);
  for await (const _ of await llm.models.generateContentStream({ model, contents: 'two', config: { maxOutputTokens: 100, candidateCount: 2 } }));
  assert.deepEqual(await ledger(earmark, id), [BILL, 0, 0]);
  const cut = await meteredOn('gemini-two-cut', 1_000_000);
  const error = await (async () => {
    for await (const _ of await cut.llm.models.generateContentStream({ model, contents: 'two-cut', config: { maxOutputTokens: 100, candidateCount: 2 } }));
  })().catch((e) => e);
  assert.ok(error instanceof Error);
  // The prompt charged; both candidates' 100 still held.
  assert.deepEqual(await ledger(earmark, cut.id), [2 * estimate('two-cut'.length), 2 * 8 * 100, 1]);
});

test('a usage count that is no whole number in bounds leaves the call in doubt', async () => {
  const kinds = ['string', 'fraction', 'boolean', 'negative', 'past'];
  const { id, llm } = await meteredOn('gemini-bad-count', 1_000_000);
  for (const kind of kinds) await llm.models.generateContent({ model, contents: `count:${kind}`, config: { maxOutputTokens: 100 } });
  const prompts = kinds.map((kind) => estimate(`count:${kind}`.length)).reduce((a, b) => a + b);
  assert.deepEqual(await ledger(earmark, id), [2 * prompts, kinds.length * 8 * 100, kinds.length]);
});

test("a call's own fetch (config.httpOptions.fetch) is metered around it, and refused unsent on an empty budget", async () => {
  const { id, llm } = await meteredOn('gemini-own-fetch', 1_000_000);
  const own = wireSpy(earmark);
  own.watch(id);
  await llm.models.generateContent({ model, contents: QUESTION, config: { maxOutputTokens: 500, httpOptions: { fetch: own.fetch } } });
  assert.deepEqual([spy.sent.length, own.sent.length], [0, 1]);
  const { state } = own.sent[0];
  assert.deepEqual([state.used, state.held, state.openReservations], [30, 8 * 500, 1]);
  assert.equal(own.sent[0].body.generationConfig.maxOutputTokens, 500);
  assert.deepEqual(await ledger(earmark, id), [BILL, 0, 0]);
  const empty = await meteredOn('gemini-own-fetch-empty', 0);
  const ownEmpty = wireSpy(earmark);
  const calls = {
    generate: () => empty.llm.models.generateContent({ model, contents: NEVER_SENT, config: { httpOptions: { fetch: ownEmpty.fetch } } }),
    stream: () => empty.llm.models.generateContentStream({ model, contents: NEVER_SENT, config: { httpOptions: { fetch: ownEmpty.fetch } } }),
  };
  for (const [surface, call] of Object.entries(calls)) {
    const error = await call().catch((e) => e);
    assert.ok(error instanceof RefusedError, `${surface}: ${error}`);
  }
  assert.deepEqual([ownEmpty.sent.length, fake.requests.length], [0, 0]);
  assert.deepEqual(await ledger(earmark, empty.id), [0, 0, 0]);
});
