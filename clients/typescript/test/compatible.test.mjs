// OpenAI-compatible providers through metered() (issue 45; the Python SDK's
// tests/client/test_compatible.py, for Node): the real openai package, its baseURL a
// provider's own (https://api.deepseek.com...), its requests carried by its fetch to an
// in-process fake on 127.0.0.1 that answers Chat Completions in each provider's published
// wire format (tests/client/fake_compatible.py has the same shapes):
// - DeepSeek (api-docs.deepseek.com): usage adds prompt_cache_hit_tokens and
//   prompt_cache_miss_tokens, of prompt_tokens;
// - Groq: a stream's usage is under x_groq.usage on the chunk with the finish_reason, and no
//   chunk has a top-level usage; an answer's usage adds queue_time, prompt_time...;
// - OpenRouter (openrouter.ai/docs/use-cases/usage-accounting): every usage carries cost
//   (dollars), cost_details and is_byok, streamed on a last chunk whether asked for or not;
//   streams carry `: OPENROUTER PROCESSING` comment lines;
// - xAI (docs.x.ai): completion_tokens leave out completion_tokens_details.reasoning_tokens,
//   which total_tokens counts;
// - Azure OpenAI: an api-version before 2024-10-21 (a preview before 2024-09-01-preview)
//   answers a body with stream_options 400 "Unrecognized request argument supplied".
// The provider is named by the base URL's host; each call is held and settled through the
// live sidecar. At the test's rates (helpers.mjs: input 2, cache read 1, output 8
// micro-dollars a token), the fake's 1,000 prompt and 200 completion tokens cost 3,600.
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import OpenAI, { AzureOpenAI } from 'openai';
import { HOSTS, ProviderNotNamedError, RefusedError, StreamUsageNotReportedError, limits, metered, namedProvider, streamsUsage } from '../dist/esm/index.js';
import { json, serve } from './fakes.mjs';
import { CEILING, NEVER_SENT, RATES, budgetId, client, ledger, putPrice, usdBudget } from './helpers.mjs';

const earmark = client();
const PROMPT = 1_000;
const COMPLETION = 200;
const TOKENS_BILL = RATES.input * PROMPT + RATES.output * COMPLETION;
const BASE_URLS = {
  deepseek: 'https://api.deepseek.com',
  groq: 'https://api.groq.com/openai/v1',
  openrouter: 'https://openrouter.ai/api/v1',
  'x-ai': 'https://api.x.ai/v1',
};
const model = (provider) => `${provider}-ts-compatible-${process.pid}`;
const AZURE_MODEL = model('azure');
const STREAM_OPTIONS_REFUSED = {
  error: { message: 'Unrecognized request argument supplied: stream_options', type: 'invalid_request_error', param: null, code: null },
};
// What the fake answers next: whose additions its answers carry ('deepseek', 'groq',
// 'openrouter', 'xai', 'azure'; '' for none), DeepSeek's cache hits, OpenRouter's cost (and a
// BYOK call's upstream cost), xAI's reasoning tokens.
let state;
let fake;

function reset(flavor, more = {}) {
  state = { flavor, hits: undefined, cost: 0, upstream: undefined, reasoning: 0, ...more };
  fake.requests.length = 0;
}

function usage() {
  const reported = {
    prompt_tokens: PROMPT,
    completion_tokens: COMPLETION,
    total_tokens: PROMPT + COMPLETION,
    completion_tokens_details: { reasoning_tokens: 0 },
  };
  if (state.hits !== undefined) Object.assign(reported, { prompt_cache_hit_tokens: state.hits, prompt_cache_miss_tokens: PROMPT - state.hits });
  if (state.flavor === 'openrouter') {
    Object.assign(reported, {
      cost: state.cost,
      is_byok: state.upstream !== undefined,
      cost_details: { upstream_inference_cost: state.upstream ?? null },
      prompt_tokens_details: { cached_tokens: 0, audio_tokens: 0 },
    });
  }
  if (state.flavor === 'groq') return { queue_time: 0.037, prompt_time: 0.0007, completion_time: 0.46, ...reported, total_time: 0.46 };
  if (state.flavor === 'xai') {
    reported.completion_tokens_details = { reasoning_tokens: state.reasoning };
    reported.total_tokens += state.reasoning;
  }
  return reported;
}

/** Whether Azure's api-version takes stream_options (GA from 2024-10-21, previews from
 * 2024-09-01-preview). */
function takesStreamOptions(version) {
  const found = /^(\d{4}-\d{2}-\d{2})(-preview)?$/.exec(version);
  return found === null || found[1] >= (found[2] ? '2024-09-01' : '2024-10-21');
}

function completions(req, res) {
  if (!req.url.pathname.endsWith('/chat/completions')) return json(res, 404, { error: { message: `Invalid URL (POST ${req.url.pathname})` } });
  const body = JSON.parse(req.body);
  const version = req.url.searchParams.get('api-version');
  if (state.flavor === 'azure' && 'stream_options' in body && !takesStreamOptions(version ?? '')) return json(res, 400, STREAM_OPTIONS_REFUSED);
  const head = { id: 'chatcmpl-compatible', created: 1_700_000_000, model: body.model, system_fingerprint: 'fp_compatible' };
  const text = 'tok '.repeat(COMPLETION);
  if (!body.stream) {
    const choice = { index: 0, message: { role: 'assistant', content: text }, logprobs: null, finish_reason: 'stop' };
    const groq = state.flavor === 'groq' ? { x_groq: { id: 'req_01jbd6g2qdfw2adyrt2az8hz4w' } } : {};
    return json(res, 200, { ...head, object: 'chat.completion', choices: [choice], usage: usage(), ...groq });
  }
  const chunk = { ...head, object: 'chat.completion.chunk' };
  const send = (event) => res.write(`data: ${typeof event === 'string' ? event : JSON.stringify(event)}\n\n`);
  res.writeHead(200, { 'content-type': 'text/event-stream' });
  if (state.flavor === 'openrouter') res.write(': OPENROUTER PROCESSING\n\n');
  send({ ...chunk, choices: [{ index: 0, delta: { role: 'assistant', content: text }, finish_reason: null }] });
  const last = { ...chunk, choices: [{ index: 0, delta: {}, finish_reason: 'stop' }] };
  if (state.flavor === 'groq') last.x_groq = { id: 'req_01jadadp0femyae9kav1gpkhe8', usage: usage() };
  send(last);
  const asked = body.stream_options?.include_usage === true;
  if (state.flavor === 'openrouter' || (asked && state.flavor !== 'groq')) send({ ...chunk, choices: [], usage: usage() });
  send('[DONE]');
  res.end();
}

/** An OpenAI client on provider's own base URL, its requests carried to the fake. */
function at(provider) {
  const toFake = (input, init) => {
    const url = new URL(input instanceof Request ? input.url : String(input));
    return globalThis.fetch(new URL(url.pathname + url.search, fake.url), init);
  };
  return new OpenAI({ baseURL: BASE_URLS[provider], apiKey: 'k', maxRetries: 0, fetch: toFake });
}

async function chat(llm, name, stream = false) {
  const request = { model: name, messages: [{ role: 'user', content: 'hi' }], max_tokens: 300 };
  if (!stream) return [await llm.chat.completions.create(request)];
  const chunks = [];
  for await (const chunk of await llm.chat.completions.create({ ...request, stream: true })) chunks.push(chunk);
  return chunks;
}

const sentBodies = () => fake.requests.map((request) => JSON.parse(request.body));

before(async () => {
  fake = await serve(completions);
  for (const provider of ['deepseek', 'groq', 'openrouter', 'x-ai', 'azure']) await putPrice(earmark, provider, model(provider));
});
after(async () => {
  earmark.close();
  await fake.close();
});

test('each known host names its provider, and any other host needs the provider option', async () => {
  const known = Object.fromEntries(Object.entries(HOSTS).map(([host, name]) => [`https://${host}/v1`, name]));
  const others = {
    'https://my-resource.openai.azure.com/openai/v1': 'azure',
    'https://my-apim.azure-api.net/openai': 'azure',
    '': 'openai',
    'https://eu.api.openai.com/v1': 'openai',
    'http://localhost:8000/v1': 'openai',
    'http://127.0.0.1:11434/v1': 'openai',
    'http://[::1]:8000/v1': 'openai',
  };
  const urls = { ...known, ...others };
  assert.deepEqual(urls, Object.fromEntries(Object.keys(urls).map((url) => [url, namedProvider(url)])));
  assert.throws(() => namedProvider('https://llm.example.com/v1'), ProviderNotNamedError);
  reset('');
  const unknown = new OpenAI({ baseURL: 'https://llm.example.com/v1', apiKey: 'k' });
  const error = (() => {
    try {
      return metered(unknown, earmark, 'b');
    } catch (thrown) {
      return thrown;
    }
  })();
  assert.ok(error instanceof ProviderNotNamedError, String(error));
  assert.equal('PROVIDER_NOT_NAMED', error.reason);
  assert.deepEqual({ host: 'llm.example.com' }, error.about);
  assert.ok(metered(unknown, earmark, 'b', { provider: 'together' }) instanceof OpenAI);
  assert.equal(0, fake.requests.length);
});

test('an Azure api-version streams its usage from 2024-10-21, or 2024-09-01-preview', () => {
  const versions = [null, '2024-10-21', '2025-04-01-preview', '2024-09-01-preview', 'latest', '2024-06-01', '2024-08-01-preview', '2024-02-15-preview'];
  assert.deepEqual([true, true, true, true, true, false, false, false], versions.map(streamsUsage));
});

test('DeepSeek, named by its host, is charged its cache hits at the cache-read rate, streamed or not', async () => {
  reset('deepseek', { hits: 800 });
  const id = await usdBudget(earmark, 'deepseek', 1_000_000);
  const llm = metered(at('deepseek'), earmark, id);
  await chat(llm, model('deepseek'));
  await chat(llm, model('deepseek'), true);
  const each = RATES.input * (PROMPT - 800) + RATES.cached * 800 + RATES.output * COMPLETION;
  assert.deepEqual(['/chat/completions', '/chat/completions'], fake.requests.map((request) => request.url.pathname));
  assert.deepEqual([2 * each, 0, 0], await ledger(earmark, id));
});

test('DeepSeek, which documents only max_tokens, is told its cap there; Groq max_completion_tokens', async () => {
  const id = await usdBudget(earmark, 'cap-name', 1_000_000);
  const question = [{ role: 'user', content: 'hi' }];
  const sent = [];
  for (const [provider, named] of [['deepseek', {}], ['deepseek', { max_completion_tokens: 50 }], ['groq', {}]]) {
    reset(provider === 'groq' ? 'groq' : 'deepseek');
    await metered(at(provider), earmark, id).chat.completions.create({ model: model(provider), messages: question, ...named });
    const [body] = sentBodies();
    sent.push([body.max_tokens, body.max_completion_tokens]);
  }
  assert.deepEqual([[CEILING, undefined], [50, 50], [undefined, CEILING]], sent);
});

test("Groq's stream settles at the usage under x_groq on its finishing chunk", async () => {
  reset('groq');
  const id = await usdBudget(earmark, 'groq', 1_000_000);
  const chunks = await chat(metered(at('groq'), earmark, id), model('groq'), true);
  // The caller sees every chunk, x_groq's usage with it.
  assert.deepEqual([null, 'stop'], chunks.map((chunk) => chunk.choices[0].finish_reason));
  assert.equal(COMPLETION, chunks.at(-1).x_groq.usage.completion_tokens);
  assert.equal('/openai/v1/chat/completions', fake.requests[0].url.pathname);
  assert.deepEqual([TOKENS_BILL, 0, 0], await ledger(earmark, id));
});

test("xAI's reasoning tokens, which its completion_tokens leave out, are charged as output", async () => {
  reset('xai', { reasoning: 500 });
  const id = await usdBudget(earmark, 'xai', 1_000_000);
  const llm = metered(at('x-ai'), earmark, id);
  await chat(llm, model('x-ai'));
  await chat(llm, model('x-ai'), true);
  const each = RATES.input * PROMPT + RATES.output * (COMPLETION + 500);
  assert.deepEqual([2 * each, 0, 0], await ledger(earmark, id));
});

test('OpenRouter settles a money budget at its reported cost, a tokens budget at its tokens', async () => {
  reset('openrouter', { cost: 0.0123 });
  const id = await usdBudget(earmark, 'openrouter', 1_000_000);
  const tokensId = budgetId('openrouter-tokens');
  await earmark.putBudget(tokensId, 1_000_000, 'tokens');
  const llm = metered(at('openrouter'), earmark, id);
  await chat(llm, model('openrouter'));
  const chunks = await chat(llm, model('openrouter'), true);
  await chat(metered(at('openrouter'), earmark, tokensId), model('openrouter'), true);
  // Its streams end with their usage, asked or not: sent as the caller wrote them, and the
  // caller sees the usage as it would unmetered.
  assert.deepEqual([false, false], sentBodies().filter((body) => body.stream).map((body) => 'stream_options' in body));
  assert.equal(0.0123, chunks.at(-1).usage.cost);
  assert.deepEqual([2 * 12_300, 0, 0], await ledger(earmark, id));
  assert.deepEqual([PROMPT + COMPLETION, 0, 0], await ledger(earmark, tokensId));
});

test('an OpenRouter BYOK call adds its upstream cost, and a cost not believed is priced from its tokens', async () => {
  reset('openrouter', { cost: 0.001, upstream: 0.02 });
  const byok = await usdBudget(earmark, 'openrouter-byok', 1_000_000);
  await chat(metered(at('openrouter'), earmark, byok), model('openrouter'));
  const odd = await usdBudget(earmark, 'openrouter-odd', 1_000_000);
  const llm = metered(at('openrouter'), earmark, odd);
  for (const cost of [-0.01, (limits.LLM_REPORTED_COST_USD_MICROS_MAX + 1) / 1_000_000, '0.0123']) {
    reset('openrouter', { cost });
    await chat(llm, model('openrouter'));
  }
  assert.deepEqual([21_000, 0, 0], await ledger(earmark, byok));
  assert.deepEqual([3 * TOKENS_BILL, 0, 0], await ledger(earmark, odd));
});

test('an empty budget refuses a compatible provider call before it is sent', async () => {
  reset('openrouter', { cost: 0.0123 });
  const id = await usdBudget(earmark, 'openrouter-empty', 0);
  const llm = metered(at('openrouter'), earmark, id);
  for (const stream of [false, true]) {
    const error = await chat(llm, model('openrouter'), stream).catch((e) => e);
    assert.ok(error instanceof RefusedError, String(error));
  }
  assert.equal(0, fake.requests.length);
  assert.deepEqual([0, 0, 0], await ledger(earmark, id));
});

test('an Azure chat stream under an api-version that streams no usage is refused unsent', async () => {
  reset('azure');
  const id = await usdBudget(earmark, 'azure-old-version', 1_000_000);
  const azure = new AzureOpenAI({ endpoint: fake.url, apiKey: 'azure-key', apiVersion: '2024-06-01', maxRetries: 0 });
  const llm = metered(azure, earmark, id, { deployments: { 'my-gpt': AZURE_MODEL } });
  const request = { model: 'my-gpt', messages: [{ role: 'user', content: NEVER_SENT }], max_tokens: 300, stream: true };
  const error = await llm.chat.completions.create(request).catch((e) => e);
  assert.ok(error instanceof StreamUsageNotReportedError, String(error));
  assert.equal('ENDPOINT_NOT_METERED', error.reason);
  assert.deepEqual({ api_version: '2024-06-01' }, error.about);
  assert.equal(0, fake.requests.length);
  // The same call, not streamed, is sent and settled at its usage.
  await chat(llm, 'my-gpt');
  assert.equal(1, fake.requests.length);
  assert.deepEqual([TOKENS_BILL, 0, 0], await ledger(earmark, id));
});
