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
import { generateText, jsonSchema, streamText, tool, wrapLanguageModel } from 'ai';
import { MockLanguageModelV3 } from 'ai/test';
import {
  DeploymentNotMappedError,
  ModalityNotMeteredError,
  PriceNotFoundError,
  RefusedError,
  ToolNotMeteredError,
  aiSdkUsage,
  earmarkMiddleware,
} from '../dist/esm/index.js';
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

// A model the openai package sends a service tier for (its name starts gpt-4); the test's
// gpt is one it drops a flex tier for, with a warning.
const gpt4 = `gpt-4-aisdk-${process.pid}`;
const gemini = `gemini-aisdk-${process.pid}`;

before(async () => {
  assert.ok(FAKE_OPENAI_URL && FAKE_ANTHROPIC_URL, 'the fakes are started by tests/clients/test_typescript.py');
  await putPrice(earmark, 'openai', gpt);
  await putPrice(earmark, 'anthropic', claude);
  // The tiers' rates: priority twice the default's, flex half.
  await putPrice(earmark, 'openai', gpt, { tier: 'flex', scale: 0.5 });
  await putPrice(earmark, 'openai', gpt4);
  await putPrice(earmark, 'openai', gpt4, { tier: 'priority', scale: 2 });
  await putPrice(earmark, 'google', gemini);
  await putPrice(earmark, 'google', gemini, { tier: 'priority', scale: 2 });
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

test('a provider-defined tool is refused before anything is held or sent; a function tool passes', async () => {
  const { id, model } = await wrapped('aisdk-provider-tools', 1_000_000, openai(gpt));
  const refused = await generateText({ model, prompt: NEVER_SENT, tools: { web_search: openai.tools.webSearch({}) }, maxRetries: 0 }).catch((e) => e);
  assert.ok(refused instanceof ToolNotMeteredError, String(refused));
  assert.equal(refused.tool, 'openai.web_search');
  const claudeModel = (await wrapped('aisdk-provider-tools-claude', 1_000_000, anthropic(claude))).model;
  const searched = await generateText({ model: claudeModel, prompt: NEVER_SENT, tools: { web_search: anthropic.tools.webSearch_20250305({}) }, maxRetries: 0 }).catch((e) => e);
  assert.ok(searched instanceof ToolNotMeteredError && searched.tool === 'anthropic.web_search_20250305', String(searched));
  assert.equal(spy.sent.length, 0);
  spy.watch(id);
  const lookup = tool({ description: 'Looks a row up.', inputSchema: jsonSchema({ type: 'object', properties: { key: { type: 'string' } } }) });
  await generateText({ model, prompt: QUESTION, tools: { lookup }, maxOutputTokens: 500 });
  assert.equal(spy.sent[0].body.tools[0].name, 'lookup');
  assert.equal(spy.sent.length, 1);
  assert.deepEqual(await ledger(earmark, id), [BILL, 0, 0]);
});

test('openai: providerOptions.openai.serviceTier is held at its tier and settled at the tier the call ran at', async () => {
  const chat = await wrapped('aisdk-tier-chat', 1_000_000, openai.chat(gpt4));
  await generateText({ model: chat.model, prompt: QUESTION, maxOutputTokens: 500, providerOptions: { openai: { serviceTier: 'priority' } } });
  assert.equal(spy.sent[0].body.service_tier, 'priority');
  // The priority row's rates are twice the default's.
  assert.deepEqual(atSend(), [2 * 30, 2 * 8 * 500, 1]);
  assert.deepEqual(await ledger(earmark, chat.id), [2 * BILL, 0, 0]);
  // Responses: the tier its answer names (the fake serves priority as asked).
  const responses = await wrapped('aisdk-tier-responses', 1_000_000, openai(gpt4));
  await streamText({ model: responses.model, prompt: QUESTION, maxOutputTokens: 500, providerOptions: { openai: { serviceTier: 'priority' } } }).consumeStream();
  assert.deepEqual(atSend(), [2 * 30, 2 * 8 * 500, 1]);
  assert.deepEqual(await ledger(earmark, responses.id), [2 * BILL, 0, 0]);
  // A tier the AI SDK drops for the model (flex, with a warning) is held at flex's rates and
  // settled at the default's, which the call ran at.
  const dropped = await wrapped('aisdk-tier-dropped', 1_000_000, openai.chat(gpt));
  await generateText({ model: dropped.model, prompt: QUESTION, maxOutputTokens: 500, providerOptions: { openai: { serviceTier: 'flex' } } });
  assert.equal(spy.sent[0].body.service_tier, undefined);
  assert.deepEqual(atSend(), [30 / 2, 8 * 500 / 2, 1]);
  assert.deepEqual(await ledger(earmark, dropped.id), [BILL, 0, 0]);
  // A tier the book has no price for is refused unsent.
  const unpriced = await wrapped('aisdk-tier-unpriced', 1_000_000, openai.chat(gpt4));
  const error = await generateText({ model: unpriced.model, prompt: NEVER_SENT, maxOutputTokens: 500, maxRetries: 0, providerOptions: { openai: { serviceTier: 'flex' } } }).catch((e) => e);
  assert.ok(error instanceof PriceNotFoundError, String(error));
  assert.equal(spy.sent.length, 0);
  assert.deepEqual(await ledger(earmark, unpriced.id), [0, 0, 0]);
});

test('google: a provider tool and non-text output are refused unsent; providerOptions.google.serviceTier is held at its tier, settled at trafficType\'s', async () => {
  // A stand-in for @ai-sdk/google's model (not installed): it answers Gemini's usage as the
  // AI SDK normalizes it and its usageMetadata's trafficType (served) in its metadata, the
  // body it was given as the body sent.
  const usage = { inputTokens: { total: 6, noCache: 6, cacheRead: 0, cacheWrite: 0 }, outputTokens: { total: 300, text: 300, reasoning: 0 } };
  let served = 'ON_DEMAND_PRIORITY';
  const base = new MockLanguageModelV3({
    provider: 'google.generative-ai',
    modelId: gemini,
    doGenerate: async (options) => ({
      content: [{ type: 'text', text: 'Row locks.' }],
      finishReason: { unified: 'stop', raw: 'STOP' },
      usage,
      warnings: [],
      providerMetadata: { google: { usageMetadata: { trafficType: served } } },
      request: { body: { serviceTier: options.providerOptions?.google?.serviceTier } },
    }),
  });
  const { id, model } = await wrapped('aisdk-google', 1_000_000, base);
  const prompt = [{ role: 'user', content: [{ type: 'text', text: QUESTION }] }];
  const grounding = { type: 'provider', id: 'google.google_search', name: 'google_search', args: {} };
  const refusals = [
    () => model.doGenerate({ prompt, maxOutputTokens: 500, tools: [grounding] }),
    () => model.doGenerate({ prompt, maxOutputTokens: 500, providerOptions: { google: { responseModalities: ['TEXT', 'IMAGE'] } } }),
  ];
  const errors = [];
  for (const refused of refusals) errors.push(await refused().catch((e) => e));
  assert.ok(errors[0] instanceof ToolNotMeteredError && errors[0].tool === 'google.google_search', String(errors[0]));
  assert.ok(errors[1] instanceof ModalityNotMeteredError, String(errors[1]));
  assert.equal(base.doGenerateCalls.length, 0);
  assert.deepEqual(await ledger(earmark, id), [0, 0, 0]);
  await model.doGenerate({ prompt, maxOutputTokens: 500, providerOptions: { google: { serviceTier: 'priority' } } });
  // Asked for priority, served on demand: charged at the default rates.
  served = 'ON_DEMAND';
  await model.doGenerate({ prompt, maxOutputTokens: 500, providerOptions: { google: { serviceTier: 'priority' } } });
  assert.equal(base.doGenerateCalls.length, 2);
  assert.deepEqual(await ledger(earmark, id), [2 * BILL + BILL, 0, 0]);
});
