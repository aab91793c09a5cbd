// What providers report of their cache and their service tier, priced as they bill it (the
// Python SDK's tests/client/test_reported_rates.py, for Node): a metered OpenAI client on
// DeepSeek's base URL is charged its prompt_cache_hit_tokens at the cache-read rate, and a
// chat answer naming another service tier than the request asked for is charged at the tier
// it names. Against a stand-in on 127.0.0.1 that answers Chat Completions as DeepSeek
// documents them (api-docs.deepseek.com: usage {prompt_tokens, completion_tokens,
// total_tokens, prompt_cache_hit_tokens, prompt_cache_miss_tokens,
// completion_tokens_details}; with stream_options.include_usage a last chunk with empty
// choices and the usage) and OpenAI's service_tier (the answer and every chunk name the
// tier that served the request, which may differ from the one asked for).
import assert from 'node:assert/strict';
import http from 'node:http';
import { after, before, test } from 'node:test';
import OpenAI from 'openai';
import { metered } from '../dist/esm/index.js';
import { RATES, client, ledger, putPrice, usdBudget } from './helpers.mjs';

const earmark = client();
const deepseekModel = `deepseek-ts-${process.pid}`;
const openaiModel = `gpt-ts-tiers-${process.pid}`;
const PROMPT = 1_000;
const COMPLETION = 200;
// What the stand-in answers next: DeepSeek's cache hits (undefined: OpenAI's shape) and
// the service_tier the answer names (undefined: none, as DeepSeek answers).
const answer = { hits: undefined, tier: undefined };
let server;
let url;

function usage() {
  const reported = {
    prompt_tokens: PROMPT,
    completion_tokens: COMPLETION,
    total_tokens: PROMPT + COMPLETION,
    completion_tokens_details: { reasoning_tokens: 0 },
  };
  if (answer.hits !== undefined) Object.assign(reported, { prompt_cache_hit_tokens: answer.hits, prompt_cache_miss_tokens: PROMPT - answer.hits });
  return reported;
}

function respond(request, response, body) {
  const head = { id: 'chatcmpl-stand-in', created: 1_700_000_000, model: body.model, system_fingerprint: 'fp_stand_in' };
  if (answer.tier !== undefined) head.service_tier = answer.tier;
  const text = 'tok '.repeat(COMPLETION);
  if (!body.stream) {
    const choice = { index: 0, message: { role: 'assistant', content: text }, logprobs: null, finish_reason: 'stop' };
    response.writeHead(200, { 'content-type': 'application/json' });
    response.end(JSON.stringify({ ...head, object: 'chat.completion', choices: [choice], usage: usage() }));
    return;
  }
  const chunk = { ...head, object: 'chat.completion.chunk' };
  const events = [
    { ...chunk, choices: [{ index: 0, delta: { role: 'assistant', content: text }, finish_reason: null }] },
    { ...chunk, choices: [{ index: 0, delta: {}, finish_reason: 'stop' }] },
  ];
  if (body.stream_options?.include_usage) events.push({ ...chunk, choices: [], usage: usage() });
  response.writeHead(200, { 'content-type': 'text/event-stream; charset=utf-8' });
  response.end(`${events.map((event) => `data: ${JSON.stringify(event)}\n\n`).join('')}data: [DONE]\n\n`);
}

before(async () => {
  server = http.createServer((request, response) => {
    let raw = '';
    request.on('data', (part) => (raw += part));
    request.on('end', () => {
      if (request.method !== 'POST' || !request.url.split('?')[0].endsWith('/chat/completions')) {
        response.writeHead(404, { 'content-type': 'application/json' });
        response.end(JSON.stringify({ error: { message: `Invalid URL (${request.method} ${request.url})`, type: 'invalid_request_error', param: null, code: null } }));
        return;
      }
      respond(request, response, JSON.parse(raw));
    });
  });
  await new Promise((resolve) => server.listen(0, '127.0.0.1', resolve));
  url = `http://127.0.0.1:${server.address().port}`;
  await putPrice(earmark, 'deepseek', deepseekModel);
  await putPrice(earmark, 'openai', openaiModel);
  await putPrice(earmark, 'openai', openaiModel, { tier: 'priority', scale: 2 });
});

after(async () => {
  earmark.close();
  server.closeAllConnections();
  await new Promise((resolve) => server.close(resolve));
});

async function call(llm, model, request = {}) {
  const body = { model, max_tokens: 300, messages: [{ role: 'user', content: 'hi' }], ...request };
  if (!request.stream) return llm.chat.completions.create(body);
  for await (const _ of await llm.chat.completions.create(body));
}

test("a DeepSeek call is charged its cache hits at the cache-read rate, streamed or not", async () => {
  answer.hits = 800;
  answer.tier = undefined;
  const id = await usdBudget(earmark, 'deepseek-hits', 1_000_000);
  const llm = metered(new OpenAI({ baseURL: url, apiKey: 'sk-fake', maxRetries: 0 }), earmark, id, { provider: 'deepseek' });
  await call(llm, deepseekModel);
  await call(llm, deepseekModel, { stream: true });
  // 200 misses at 2, 800 hits at 1, 200 output tokens at 8: 400 + 800 + 1,600 = 2,800 a call
  // (all 1,000 input tokens at the input rate would be 3,600).
  const each = 200 * RATES.input + 800 * RATES.cached + 200 * RATES.output;
  assert.deepEqual([each, await ledger(earmark, id)], [2_800, [2 * each, 0, 0]]);
});

test('an answer naming another tier than asked is charged at the tier it names', async () => {
  answer.hits = undefined;
  const id = await usdBudget(earmark, 'served-tier', 1_000_000);
  const llm = metered(new OpenAI({ baseURL: `${url}/v1`, apiKey: 'sk-fake', maxRetries: 0 }), earmark, id);
  answer.tier = 'default';
  await call(llm, openaiModel, { service_tier: 'priority' });
  answer.tier = 'priority';
  await call(llm, openaiModel, { service_tier: 'auto', stream: true });
  // 1,000 input and 200 output tokens: 2,000 + 1,600 at the default rates, twice that at
  // the priority row's.
  const atDefault = PROMPT * RATES.input + COMPLETION * RATES.output;
  assert.deepEqual([atDefault, await ledger(earmark, id)], [3_600, [3 * atDefault, 0, 0]]);
});
