// The openai wrapper against the fake OpenAI-compatible server of tests/fake_openai.py
// (FAKE_OPENAI_URL): it answers 300 completion tokens (at most the request's maximum), and
// prompt tokens as the messages' characters over four, plus one. The price here is 2
// micro-dollars an input token and 8 an output token, so a call costs exactly 2 * prompt +
// 8 * completion.
import assert from 'node:assert/strict';
import http from 'node:http';
import { after, before, test } from 'node:test';
import OpenAI from 'openai';
import { RefusedError } from '../dist/index.js';
import { HoldCappedError, StreamCappedError, metered, promptTokens } from '../dist/openai.js';
import { FAKE_OPENAI_URL, budgetId, client } from './helpers.mjs';

const earmark = client();
const openai = new OpenAI({ baseURL: FAKE_OPENAI_URL, apiKey: 'sk-fake', timeout: 10_000 });
const model = `gpt-ts-${process.pid}`;
const cost = (usage) => 2 * usage.prompt_tokens + 8 * usage.completion_tokens;
const ask = (text) => [{ role: 'user', content: text }];

before(async () => {
  assert.ok(FAKE_OPENAI_URL, 'FAKE_OPENAI_URL is set by tests/clients/test_typescript.py');
  await earmark.putPrice({
    provider: 'openai', model, effectiveFrom: new Date('2026-01-01T00:00:00Z'),
    inputUsdMicrosPerMtok: 2_000_000, outputUsdMicrosPerMtok: 8_000_000, source: 'test',
  });
});
after(() => earmark.close());

async function usdBudget(name, limit, options) {
  const id = budgetId(name);
  await earmark.putBudget(id, limit, 'usd_micros', options);
  return id;
}

test('a call settles at exactly what the provider billed', async () => {
  const id = await usdBudget('llm-billed', 1_000_000);
  const llm = metered(openai, earmark, id);
  const reply = await llm.chat.completions.create({ model, max_tokens: 500, messages: ask('One line on row locks.') });
  assert.equal(reply.usage.completion_tokens, 300);
  const state = await earmark.getBudget(id);
  assert.deepEqual([state.used, state.held, state.openReservations], [cost(reply.usage), 0, 0]);
});

test('a hold is refused before anything is sent', async () => {
  const id = await usdBudget('llm-refused', 1_000);
  const llm = metered(openai, earmark, id);
  const error = await llm.chat.completions.create({ model, max_tokens: 500, messages: ask('too big') }).catch((e) => e);
  assert.ok(error instanceof RefusedError, String(error));
  assert.equal(error.reason, 'INSUFFICIENT_BUDGET');
  assert.equal((await earmark.getBudget(id)).used, 0);
});

test('without an output limit, the provider is capped at what the hold covers', async () => {
  // The model's estimate is 1,000 micro-dollars: after the prompt, (1000 - 2 * prompt) / 8
  // output tokens, far fewer than the 300 the fake would answer.
  const id = await usdBudget('llm-cap', 1_000_000, { defaultEstimate: 1_000 });
  const llm = metered(openai, earmark, id);
  const messages = ask('Tell me everything.');
  const prompt = promptTokens({ messages });
  const reply = await llm.chat.completions.create({ model, messages });
  const covered = Math.floor((1_000 - 2 * prompt) / 8);
  assert.equal(reply.usage.completion_tokens, covered);
  const state = await earmark.getBudget(id);
  assert.ok(state.used <= 1_000);
  assert.deepEqual([state.used, state.held], [cost(reply.usage), 0]);
});

test('a hold that cannot cover the prompt refuses before sending', async () => {
  const id = await usdBudget('llm-prompt', 1_000_000, { defaultEstimate: 10 });
  const llm = metered(openai, earmark, id);
  const error = await llm.chat.completions.create({ model, messages: ask('x'.repeat(600)) }).catch((e) => e);
  assert.ok(error instanceof HoldCappedError, String(error));
  const state = await earmark.getBudget(id);
  assert.deepEqual([state.used, state.held], [0, 0]);
});

test('a 4xx settles at nothing and rethrows', async () => {
  const id = await usdBudget('llm-400', 1_000_000);
  const llm = metered(openai, earmark, id);
  const error = await llm.chat.completions.create({ model, max_tokens: 100, messages: ask('fail:400') }).catch((e) => e);
  assert.equal(error.status, 400);
  const state = await earmark.getBudget(id);
  assert.deepEqual([state.used, state.held, state.openReservations], [0, 0, 0]);
});

test('a 5xx after sending settles UNKNOWN: the hold stays in doubt, and the error is rethrown', async () => {
  const id = await usdBudget('llm-500', 1_000_000);
  const llm = metered(openai, earmark, id);
  const messages = ask('fail:503');
  const error = await llm.chat.completions.create({ model, max_tokens: 100, messages }).catch((e) => e);
  assert.equal(error.status, 503);
  const state = await earmark.getBudget(id);
  // Held whole (prompt and answer) until an operator resolves it; the prompt charged.
  const held = 2 * promptTokens({ messages }) + 8 * 100;
  assert.deepEqual([state.used + state.held, state.openReservations], [held, 1]);
  assert.equal(state.used, 2 * promptTokens({ messages }));
});

test('a timeout after sending settles UNKNOWN: the hold stays in doubt', async () => {
  const id = await usdBudget('llm-timeout', 1_000_000);
  const impatient = new OpenAI({ baseURL: FAKE_OPENAI_URL, apiKey: 'sk-fake', timeout: 300 });
  const llm = metered(impatient, earmark, id);
  const messages = ask('slow');
  const error = await llm.chat.completions.create({ model, max_tokens: 100, messages }).catch((e) => e);
  assert.equal(error.constructor.name, 'APIConnectionTimeoutError');
  const state = await earmark.getBudget(id);
  assert.deepEqual([state.used, state.used + state.held, state.openReservations], [2 * promptTokens({ messages }), 2 * promptTokens({ messages }) + 800, 1]);
});

test('a connection refused before sending settles at nothing', async () => {
  const id = await usdBudget('llm-refused-conn', 1_000_000);
  // A port that was free a moment ago: nothing listens there.
  const probe = http.createServer();
  await new Promise((resolve) => probe.listen(0, '127.0.0.1', resolve));
  const { port } = probe.address();
  await new Promise((resolve) => probe.close(resolve));
  const nowhere = new OpenAI({ baseURL: `http://127.0.0.1:${port}/v1`, apiKey: 'sk-fake' });
  const llm = metered(nowhere, earmark, id);
  const error = await llm.chat.completions.create({ model, max_tokens: 100, messages: ask('hello') }).catch((e) => e);
  assert.equal(error.constructor.name, 'APIConnectionError');
  const state = await earmark.getBudget(id);
  assert.deepEqual([state.used, state.held, state.openReservations], [0, 0, 0]);
});

test('a 429 is tried again on a new hold, each settled at nothing', async () => {
  const id = await usdBudget('llm-429', 1_000_000);
  const llm = metered(openai, earmark, id, { retry: { attemptsMax: 2, backoffBaseMs: 1, backoffMaxMs: 1 } });
  const error = await llm.chat.completions.create({ model, max_tokens: 100, messages: ask('fail:429') }).catch((e) => e);
  assert.equal(error.status, 429);
  const state = await earmark.getBudget(id);
  assert.deepEqual([state.used, state.held, state.openReservations], [0, 0, 0]);
});

test('a stream settles at its streamed usage and hides the usage chunk', async () => {
  const id = await usdBudget('llm-stream', 1_000_000);
  const llm = metered(openai, earmark, id);
  const stream = await llm.chat.completions.create({ model, max_tokens: 100, stream: true, messages: ask('stream me') });
  let text = '';
  let usageChunks = 0;
  for await (const chunk of stream) {
    if (chunk.choices.length === 0) usageChunks += 1;
    text += chunk.choices[0]?.delta?.content ?? '';
  }
  assert.equal(usageChunks, 0);
  assert.equal(text, 'tok '.repeat(100));
  const prompt = Math.floor('stream me'.length / 4) + 1;
  const state = await earmark.getBudget(id);
  assert.deepEqual([state.used, state.held], [2 * prompt + 8 * 100, 0]);
});

test('a stream without a limit is capped by the provider at what the hold covers', async () => {
  const id = await usdBudget('llm-stream-est', 1_000_000, { defaultEstimate: 1_000 });
  const llm = metered(openai, earmark, id);
  const messages = ask('stream without a limit');
  const stream = await llm.chat.completions.create({ model, stream: true, messages });
  let read = 0;
  for await (const chunk of stream) read += chunk.choices[0]?.delta?.content ? 1 : 0;
  const covered = Math.floor((1_000 - 2 * promptTokens({ messages })) / 8);
  assert.equal(read, covered);
  const state = await earmark.getBudget(id);
  assert.ok(state.used <= 1_000);
  assert.equal(state.held, 0);
});

// A provider that streams past the maximum it was asked for: the wrapper's own charges
// stop it.
async function overrunningProvider() {
  const server = http.createServer((req, res) => {
    req.resume();
    req.on('end', () => {
      res.writeHead(200, { 'content-type': 'text/event-stream', connection: 'close' });
      let sent = 0;
      const chunk = (choices, usage = null) =>
        `data: ${JSON.stringify({ id: 'x', object: 'chat.completion.chunk', created: 0, model, choices, usage })}\n\n`;
      const timer = setInterval(() => {
        if (res.destroyed || sent >= 1_000) {
          clearInterval(timer);
          if (!res.destroyed) res.end('data: [DONE]\n\n');
          return;
        }
        sent += 1;
        res.write(chunk([{ index: 0, delta: { content: 'tok ' }, finish_reason: null }]));
      }, 1);
      res.on('close', () => clearInterval(timer));
    });
  });
  await new Promise((resolve) => server.listen(0, '127.0.0.1', resolve));
  return server;
}

test('a stream is charged as it goes and closed when a charge comes back capped', async () => {
  const server = await overrunningProvider();
  try {
    const overrunning = new OpenAI({ baseURL: `http://127.0.0.1:${server.address().port}/v1`, apiKey: 'sk-fake' });
    const id = await usdBudget('llm-stream-cap', 1_000_000);
    const llm = metered(overrunning, earmark, id, { streamChargeTokens: 32 });
    const messages = ask('a long stream');
    const stream = await llm.chat.completions.create({ model, max_tokens: 64, stream: true, messages });
    let read = 0;
    const error = await (async () => {
      for await (const chunk of stream) read += chunk.choices.length;
    })().catch((e) => e);
    assert.ok(error instanceof StreamCappedError, String(error));
    // Charges at 32 and 64 tokens fit the hold (64 tokens after the prompt); the one at 96
    // comes back capped: the stream closes and the hold settles at the tokens read.
    assert.equal(read, 95);
    const state = await earmark.getBudget(id);
    assert.deepEqual([state.used, state.held, state.openReservations], [2 * promptTokens({ messages }) + 8 * 96, 0, 0]);
  } finally {
    server.closeAllConnections();
    server.close();
  }
});
