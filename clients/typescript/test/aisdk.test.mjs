// earmarkMiddleware() on two real AI SDK providers, @ai-sdk/openai (Chat Completions) and
// @ai-sdk/anthropic (Messages), each wrapped by the real `ai` package's wrapLanguageModel and
// pointed at the fake providers of tests/fake_openai.py and tests/fake_anthropic.py:
// generateText and streamText held before they are sent (the wire spy reads the budget as
// each request leaves), settled at the usage the AI SDK reports, refused unsent on an empty
// budget, told the model's ceiling when they name no maximum, cache reads and writes at
// their rates, and a stream cut before its usage left in doubt. The fakes bill a prompt as
// its characters over four, plus one, and answer 300 output tokens (at most the maximum);
// at the test's rates (helpers.mjs) a call costs 2 an input token, 1 a cache read, 3 a cache
// write and 8 an output token.
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { createAnthropic } from '@ai-sdk/anthropic';
import { createOpenAI } from '@ai-sdk/openai';
import { generateText, streamText, wrapLanguageModel } from 'ai';
import { DeploymentNotMappedError, RefusedError, aiSdkUsage, earmarkMiddleware } from '../dist/esm/index.js';
import { providerOf } from '../dist/esm/ai-sdk.js';
import {
  CEILING,
  FAKE_ANTHROPIC_CACHE_URL,
  FAKE_ANTHROPIC_URL,
  FAKE_OPENAI_URL,
  NEVER_SENT,
  client,
  estimate,
  ledger,
  putPrice,
  usdBudget,
  wireSpy,
} from './helpers.mjs';

const earmark = client();
const gpt = `gpt-aisdk-${process.pid}`;
const claude = `claude-aisdk-${process.pid}`;
const spy = wireSpy(earmark);
const openai = createOpenAI({ baseURL: FAKE_OPENAI_URL, apiKey: 'sk-fake', fetch: spy.fetch });
const anthropic = createAnthropic({ baseURL: `${FAKE_ANTHROPIC_URL}/v1`, apiKey: 'sk-fake', fetch: spy.fetch });
const caching = createAnthropic({ baseURL: `${FAKE_ANTHROPIC_CACHE_URL}/v1`, apiKey: 'sk-fake', fetch: spy.fetch });
// 22 characters: Earmark holds ceil(22 / 3) + 4 + 3 = 15 prompt tokens; each fake bills
// floor(22 / 4) + 1 = 6.
const QUESTION = 'One line on row locks.';
const BILL = 2 * 6 + 8 * 300;
const MODELS = {
  openai: () => openai.chat(gpt),
  anthropic: () => anthropic(claude),
};

before(async () => {
  assert.ok(FAKE_OPENAI_URL && FAKE_ANTHROPIC_URL, 'the fakes are started by tests/clients/test_typescript.py');
  await putPrice(earmark, 'openai', gpt);
  await putPrice(earmark, 'anthropic', claude);
});
after(() => earmark.close());

async function wrapped(name, limit, base, options = {}) {
  const id = await usdBudget(earmark, name, limit);
  spy.watch(id);
  return { id, model: wrapLanguageModel({ model: base, middleware: earmarkMiddleware(earmark, id, options) }) };
}

function atSend() {
  assert.equal(spy.sent.length, 1, `one request reached the wire, not ${spy.sent.length}`);
  const { state } = spy.sent[0];
  return [state.used, state.held, state.openReservations];
}

for (const [provider, base] of Object.entries(MODELS)) {
  test(`${provider}: generateText is held before it is sent and settled at the bill`, async () => {
    const { id, model } = await wrapped(`${provider}-generate`, 1_000_000, base());
    const { usage } = await generateText({ model, prompt: QUESTION, maxOutputTokens: 500 });
    assert.deepEqual([usage.inputTokens, usage.outputTokens], [6, 300]);
    // Held 2 * 15 + 8 * 500, of which the prompt's 30 was charged by the Reserve.
    assert.deepEqual(atSend(), [30, 8 * 500, 1]);
    assert.equal(spy.sent[0].body.max_tokens, 500);
    assert.deepEqual(await ledger(earmark, id), [BILL, 0, 0]);
  });

  test(`${provider}: streamText is settled from its finish part`, async () => {
    const { id, model } = await wrapped(`${provider}-stream`, 1_000_000, base());
    const result = streamText({ model, prompt: QUESTION, maxOutputTokens: 500 });
    await result.consumeStream();
    const usage = await result.usage;
    assert.deepEqual([usage.inputTokens, usage.outputTokens], [6, 300]);
    assert.deepEqual(atSend(), [30, 8 * 500, 1]);
    assert.equal(spy.sent[0].body.stream, true);
    assert.deepEqual(await ledger(earmark, id), [BILL, 0, 0]);
  });

  test(`${provider}: no maximum of its own, the model is told its ceiling`, async () => {
    const { id, model } = await wrapped(`${provider}-ceiling`, 1_000_000, base());
    await generateText({ model, prompt: QUESTION });
    assert.deepEqual(atSend(), [30, 8 * CEILING, 1]);
    assert.equal(spy.sent[0].body.max_tokens, CEILING);
    assert.deepEqual(await ledger(earmark, id), [BILL, 0, 0]);
  });

  test(`${provider}: generate and stream are refused before sending on an empty budget`, async () => {
    const { id, model } = await wrapped(`${provider}-empty`, 0, base());
    const refused = await generateText({ model, prompt: NEVER_SENT, maxRetries: 0 }).catch((e) => e);
    assert.ok(refused instanceof RefusedError, String(refused));
    const errors = [];
    const result = streamText({ model, prompt: NEVER_SENT, maxRetries: 0, onError: ({ error }) => errors.push(error) });
    await result.consumeStream();
    assert.ok(errors[0] instanceof RefusedError, String(errors[0]));
    assert.equal(spy.sent.length, 0);
    assert.deepEqual(await ledger(earmark, id), [0, 0, 0]);
  });
}

test('anthropic: cache reads and writes settle at their rates, plain and streamed', async () => {
  assert.ok(FAKE_ANTHROPIC_CACHE_URL);
  // 800 characters: the fake bills floor(800 / 4) + 1 = 201 prompt tokens, 40 read from
  // the cache, 100 written to it (five-minute writes) and 61 plain input.
  const long = 'x'.repeat(800);
  const bill = 2 * 61 + 1 * 40 + 3 * 100 + 8 * 300;
  const plain = await wrapped('anthropic-cache', 1_000_000, caching(claude));
  const { usage } = await generateText({ model: plain.model, prompt: long, maxOutputTokens: 500 });
  assert.deepEqual([usage.inputTokens, usage.inputTokenDetails.cacheReadTokens, usage.inputTokenDetails.cacheWriteTokens], [201, 40, 100]);
  // Earmark holds ceil(800 / 3) + 4 + 3 = 274 prompt tokens.
  assert.deepEqual(atSend(), [2 * estimate(800), 8 * 500, 1]);
  assert.deepEqual(await ledger(earmark, plain.id), [bill, 0, 0]);
  const streamed = await wrapped('anthropic-cache-stream', 1_000_000, caching(claude));
  await streamText({ model: streamed.model, prompt: long, maxOutputTokens: 500 }).consumeStream();
  assert.deepEqual(await ledger(earmark, streamed.id), [bill, 0, 0]);
});

test('anthropic: a stream cut before its usage is in doubt', async () => {
  const { id, model } = await wrapped('anthropic-cut', 1_000_000, anthropic(claude));
  const errors = [];
  await streamText({ model, prompt: 'cut', maxOutputTokens: 100, maxRetries: 0, onError: ({ error }) => errors.push(error) }).consumeStream();
  // "cut": ceil(3 / 3) + 4 + 3 = 8 prompt tokens, charged; the answer's 100 still held.
  assert.deepEqual(await ledger(earmark, id), [2 * 8, 8 * 100, 1]);
});

test('an Azure deployment is priced as its base model; an unmapped one is refused unsent', async () => {
  await putPrice(earmark, 'azure', gpt);
  const deployments = { 'my-gpt': gpt };
  const { id, model } = await wrapped('azure-deployment', 1_000_000, openai.chat('my-gpt'), { provider: 'azure', deployments });
  await generateText({ model, prompt: QUESTION, maxOutputTokens: 500 });
  assert.equal(spy.sent[0].body.model, 'my-gpt');
  assert.deepEqual(await ledger(earmark, id), [BILL, 0, 0]);
  const other = await wrapped('azure-unmapped', 1_000_000, openai.chat('their-gpt'), { provider: 'azure', deployments });
  const refused = await generateText({ model: other.model, prompt: NEVER_SENT, maxRetries: 0 }).catch((e) => e);
  assert.ok(refused instanceof DeploymentNotMappedError, String(refused));
  assert.equal(spy.sent.length, 0);
});

test('a Bedrock inference profile is priced under genai-prices\' name for its model', async () => {
  // A model named as Bedrock names one (a geographic profile), sent through the fake OpenAI.
  const bedrockModel = `anthropic.claude-aisdk-${process.pid}-v1:0`;
  await putPrice(earmark, 'aws', `regional.${bedrockModel}`);
  const { id, model } = await wrapped('bedrock-profile', 1_000_000, openai.chat(`us.${bedrockModel}`), { provider: 'aws' });
  await generateText({ model, prompt: QUESTION, maxOutputTokens: 500 });
  assert.equal(spy.sent[0].body.model, `us.${bedrockModel}`);
  assert.deepEqual(await ledger(earmark, id), [BILL, 0, 0]);
});

test('openai: the Responses API model (the provider default) is held and settled too', async () => {
  const { id, model } = await wrapped('openai-responses', 1_000_000, openai(gpt));
  const { usage } = await generateText({ model, prompt: QUESTION, maxOutputTokens: 500 });
  assert.equal(spy.sent[0].path.endsWith('/responses'), true);
  assert.equal(spy.sent[0].body.max_output_tokens, 500);
  assert.deepEqual(atSend(), [30, 8 * 500, 1]);
  assert.deepEqual([usage.inputTokens, usage.outputTokens], [6, 300]);
  assert.deepEqual(await ledger(earmark, id), [BILL, 0, 0]);
});

test('the AI SDK usage and provider names as the price book reads them', () => {
  // Anthropic through the AI SDK: total counts the cache reads and writes; the raw usage
  // names the one-hour writes.
  const usage = {
    inputTokens: { total: 17, noCache: 10, cacheRead: 5, cacheWrite: 2 },
    outputTokens: { total: 7, text: 7 },
    raw: { cache_creation: { ephemeral_1h_input_tokens: 2 } },
  };
  assert.deepEqual(aiSdkUsage(usage), { inputTokens: 17, outputTokens: 7, cachedInputTokens: 5, cacheWriteInputTokens: 2, cacheWriteLongInputTokens: 2 });
  // No total: the parts; reasoning is output.
  assert.deepEqual(aiSdkUsage({ inputTokens: { noCache: 6, cacheRead: 4 }, outputTokens: { text: 2, reasoning: 1 } }), {
    inputTokens: 10, outputTokens: 3, cachedInputTokens: 4, cacheWriteInputTokens: 0,
  });
  // A provider that reports no count: no usage, and the hold stays in doubt.
  assert.equal(aiSdkUsage({ inputTokens: {}, outputTokens: {} }), null);
  const names = ['openai.responses', 'anthropic.messages', 'google.generative-ai', 'amazon-bedrock', 'azure.chat', 'xai.chat', 'togetherai.chat', 'deepseek.chat', 'groq.chat', 'mistral.chat'];
  assert.deepEqual(names.map((provider) => providerOf({ provider, modelId: 'm' })), ['openai', 'anthropic', 'google', 'aws', 'azure', 'x-ai', 'together', 'deepseek', 'groq', 'mistral']);
});
