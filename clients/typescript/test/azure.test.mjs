// metered() on the openai package's AzureOpenAI against an in-process fake Azure OpenAI
// (test/fakes.mjs) that answers as Azure publishes: /openai/deployments/{deployment}/...
// and /openai/responses, with api-version in the query, an api-key header, the content
// filter's results on the answer, and a stream whose first chunk carries only
// prompt_filter_results (no choices, no usage). Each call is priced as its deployment's base
// model under provider "azure" (deployments: { name: baseModel }). The fake bills 40 prompt
// tokens, 10 of them read from the cache, and 20 completion tokens: at the test's rates
// (helpers.mjs) 2 * (40 - 10) + 1 * 10 + 8 * 20 = 230 micro-dollars.
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { AzureOpenAI } from 'openai';
import { DeploymentNotMappedError, RefusedError, metered } from '../dist/esm/index.js';
import { json, serve, sse } from './fakes.mjs';
import { NEVER_SENT, client, ledger, putPrice, usdBudget, wireSpy } from './helpers.mjs';

const earmark = client();
const base = `gpt-azure-${process.pid}`;
const deployments = { 'my-gpt': base };
const spy = wireSpy(earmark);
const USAGE = { prompt_tokens: 40, completion_tokens: 20, total_tokens: 60, prompt_tokens_details: { cached_tokens: 10 } };
const BILL = 2 * (40 - 10) + 1 * 10 + 8 * 20;
const FILTERS = { hate: { filtered: false, severity: 'safe' }, violence: { filtered: false, severity: 'safe' } };
// 22 characters: Earmark holds ceil(22 / 3) + 4 + 3 = 15 prompt tokens.
const QUESTION = 'One line on row locks.';
const ask = (text) => [{ role: 'user', content: text }];
let fake;
let azure;

function completions(req, res) {
  const body = JSON.parse(req.body);
  const chunk = (choices, extra = {}) => ({ id: 'c1', object: 'chat.completion.chunk', created: 1, model: 'gpt-4o', choices, ...extra });
  if (!body.stream) {
    const choice = { index: 0, message: { role: 'assistant', content: 'Row locks.' }, finish_reason: 'stop', content_filter_results: FILTERS };
    return json(res, 200, {
      id: 'c1', object: 'chat.completion', created: 1, model: 'gpt-4o', choices: [choice], usage: USAGE,
      prompt_filter_results: [{ prompt_index: 0, content_filter_results: FILTERS }],
    });
  }
  const events = [
    { id: '', object: '', created: 0, model: '', choices: [], prompt_filter_results: [{ prompt_index: 0, content_filter_results: FILTERS }] },
    chunk([{ index: 0, delta: { role: 'assistant', content: 'Row ' }, finish_reason: null, content_filter_results: {} }]),
    chunk([{ index: 0, delta: { content: 'locks.' }, finish_reason: 'stop', content_filter_results: FILTERS }]),
  ];
  if (body.stream_options?.include_usage) events.push(chunk([], { usage: USAGE }));
  events.push('[DONE]');
  return sse(res, events);
}

before(async () => {
  fake = await serve((req, res) => {
    if (req.headers['api-key'] !== 'azure-key' || req.url.searchParams.get('api-version') !== '2024-10-21') {
      return json(res, 401, { error: { code: '401', message: 'Access denied' } });
    }
    if (/^\/openai\/deployments\/[^/]+\/chat\/completions$/.test(req.url.pathname)) return completions(req, res);
    if (req.url.pathname === '/openai/responses') {
      const usage = { input_tokens: 40, input_tokens_details: { cached_tokens: 10 }, output_tokens: 20, output_tokens_details: { reasoning_tokens: 0 }, total_tokens: 60 };
      return json(res, 200, { id: 'resp_1', object: 'response', created_at: 1, status: 'completed', model: 'gpt-4o', output: [], usage });
    }
    return json(res, 404, { error: { code: '404', message: 'Resource not found' } });
  });
  azure = new AzureOpenAI({ endpoint: fake.url, apiKey: 'azure-key', apiVersion: '2024-10-21', fetch: spy.fetch, maxRetries: 0 });
  await putPrice(earmark, 'azure', base);
});
after(async () => {
  earmark.close();
  await fake.close();
});

async function meteredOn(name, limit, options = { deployments }) {
  const id = await usdBudget(earmark, name, limit);
  spy.watch(id);
  fake.requests.length = 0;
  return { id, llm: metered(azure, earmark, id, options) };
}

test('a chat completion is held before it is sent and priced as its deployment base model', async () => {
  const { id, llm } = await meteredOn('azure-chat', 1_000_000);
  assert.ok(llm instanceof AzureOpenAI);
  const reply = await llm.chat.completions.create({ model: 'my-gpt', max_tokens: 500, messages: ask(QUESTION) });
  assert.equal(reply.usage.prompt_tokens, 40);
  assert.equal(spy.sent[0].path, '/openai/deployments/my-gpt/chat/completions');
  // Held 2 * 15 + 8 * 500, of which the prompt's 30 was charged by the Reserve.
  assert.deepEqual([spy.sent[0].state.used, spy.sent[0].state.held], [30, 8 * 500]);
  assert.deepEqual(await ledger(earmark, id), [BILL, 0, 0]);
});

test('a chat stream passes the content filter chunk and settles at the usage chunk', async () => {
  const { id, llm } = await meteredOn('azure-stream', 1_000_000);
  const chunks = [];
  for await (const chunk of await llm.chat.completions.create({ model: 'my-gpt', max_tokens: 500, stream: true, messages: ask(QUESTION) })) {
    chunks.push(chunk);
  }
  // The filter chunk (no choices) reaches the caller; the usage chunk Earmark asked for does not.
  assert.deepEqual(chunks.map((c) => [c.choices.length, 'prompt_filter_results' in c, c.usage ?? null]), [[0, true, null], [1, false, null], [1, false, null]]);
  assert.deepEqual(JSON.parse(fake.requests[0].body).stream_options, { include_usage: true });
  assert.deepEqual(await ledger(earmark, id), [BILL, 0, 0]);
});

test('the Responses API, which names the deployment in the body, is priced as its base model', async () => {
  const { id, llm } = await meteredOn('azure-responses', 1_000_000);
  await llm.responses.create({ model: 'my-gpt', max_output_tokens: 500, input: QUESTION });
  assert.equal(spy.sent[0].path, '/openai/responses');
  assert.deepEqual(await ledger(earmark, id), [BILL, 0, 0]);
});

test('a deployment with no base model is refused before it is sent', async () => {
  const { id, llm } = await meteredOn('azure-unmapped', 1_000_000);
  const error = await llm.chat.completions.create({ model: 'their-gpt', max_tokens: 50, messages: ask(NEVER_SENT) }).catch((e) => e);
  assert.ok(error instanceof DeploymentNotMappedError, String(error));
  assert.equal(error.about.deployment, 'their-gpt');
  const fixed = metered(new AzureOpenAI({ endpoint: fake.url, apiKey: 'azure-key', apiVersion: '2024-10-21', deployment: 'their-gpt', fetch: spy.fetch }), earmark, id, { deployments });
  const pinned = await fixed.chat.completions.create({ model: 'my-gpt', max_tokens: 50, messages: ask(NEVER_SENT) }).catch((e) => e);
  assert.ok(pinned instanceof DeploymentNotMappedError, `the path's deployment wins over the body's model: ${pinned}`);
  assert.deepEqual([spy.sent.length, fake.requests.length], [0, 0]);
  assert.deepEqual(await ledger(earmark, id), [0, 0, 0]);
});

test('an empty budget refuses every surface before sending', async () => {
  const { id, llm } = await meteredOn('azure-empty', 0);
  const calls = {
    chat: () => llm.chat.completions.create({ model: 'my-gpt', max_tokens: 50, messages: ask(NEVER_SENT) }),
    stream: () => llm.chat.completions.create({ model: 'my-gpt', max_tokens: 50, stream: true, messages: ask(NEVER_SENT) }),
    responses: () => llm.responses.create({ model: 'my-gpt', max_output_tokens: 50, input: NEVER_SENT }),
  };
  for (const [surface, call] of Object.entries(calls)) {
    const error = await call().catch((e) => e);
    assert.ok(error instanceof RefusedError, `${surface}: ${error}`);
  }
  assert.deepEqual([spy.sent.length, fake.requests.length], [0, 0]);
  assert.deepEqual(await ledger(earmark, id), [0, 0, 0]);
});

test('an AzureOpenAI client is metered only with its deployments mapped', () => {
  assert.throws(() => metered(azure, earmark, 'any'), TypeError);
});
