// What an attack review of the metered clients found, for the fetch-based ones (the real
// openai and @anthropic-ai/sdk packages) against an in-process fake on 127.0.0.1 that
// answers OpenAI's Chat Completions and Responses and Anthropic's Messages as they publish
// them, with the counts each test asks for (the Python SDK's fixes of issue 45, ported):
// - a write other than POST (PATCH, PUT) is routed as a POST to its path is, and refused
//   unsent unless its path is free; reads and deletes pass;
// - a reported token count that is no whole number in bounds leaves the call in doubt;
// - a copy given another base URL (withOptions({ baseURL })) is priced under the provider
//   its host names, and refused (ProviderNotNamedError) on a host Earmark does not know;
// - a billable request to another host than the client's base URL names (an absolute URL
//   given a call) is refused unsent.
// The fake bills 30 input and 20 output tokens: at the test's rates (helpers.mjs) 2 * 30 +
// 8 * 20 = 220 micro-dollars.
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import Anthropic from '@anthropic-ai/sdk';
import OpenAI, { AzureOpenAI } from 'openai';
import { EndpointNotMeteredError, ProviderNotNamedError, limits, metered } from '../dist/esm/index.js';
import { json, serve, sse } from './fakes.mjs';
import { NEVER_SENT, client, estimate, ledger, putPrice, usdBudget } from './helpers.mjs';

const earmark = client();
const gpt = `gpt-ts-attack-${process.pid}`;
const claude = `claude-ts-attack-${process.pid}`;
const BILL = 2 * 30 + 8 * 20;
// Counts out of shape, by the name a prompt gives them ("count:string"...).
const BAD = { string: '20', fraction: 20.5, boolean: true, negative: -1, past: limits.TOKENS_PER_REQUEST_MAX + 1 };
let fake;

/** The output count a prompt asks the fake to report: one of BAD, or 20. */
function output(body) {
  const named = /count:(\w+)/.exec(JSON.stringify(body))?.[1];
  return named === undefined ? 20 : BAD[named];
}

function answer(req, res) {
  const { pathname } = req.url;
  const body = req.body ? JSON.parse(req.body) : {};
  if (req.method === 'GET' && pathname === '/v1/models') return json(res, 200, { object: 'list', data: [] });
  if (req.method !== 'POST') return json(res, 200, { id: 'vs_1', object: 'vector_store' });
  if (pathname.endsWith('/chat/completions')) {
    const head = { id: 'chatcmpl-attack', created: 1_700_000_000, model: body.model };
    const usage = { prompt_tokens: 30, completion_tokens: output(body), total_tokens: 50 };
    const message = { role: 'assistant', content: 'Row locks.' };
    if (!body.stream) return json(res, 200, { ...head, object: 'chat.completion', choices: [{ index: 0, message, finish_reason: 'stop' }], usage });
    const chunk = { ...head, object: 'chat.completion.chunk' };
    return sse(res, [
      { ...chunk, choices: [{ index: 0, delta: message, finish_reason: 'stop' }] },
      { ...chunk, choices: [], usage },
      '[DONE]',
    ]);
  }
  if (pathname === '/v1/responses') {
    const usage = { input_tokens: 30, output_tokens: output(body), total_tokens: 50, input_tokens_details: { cached_tokens: 0 } };
    const content = [{ type: 'output_text', text: 'Row locks.', annotations: [] }];
    const item = { type: 'message', id: 'msg_1', status: 'completed', role: 'assistant', content };
    return json(res, 200, { id: 'resp_1', object: 'response', created_at: 1_700_000_000, status: 'completed', model: body.model, output: [item], usage });
  }
  if (pathname === '/v1/messages') {
    const usage = { input_tokens: 30, output_tokens: output(body) };
    const message = { id: 'msg_1', type: 'message', role: 'assistant', model: body.model, content: [{ type: 'text', text: 'Row locks.' }], stop_reason: 'end_turn', stop_sequence: null };
    if (!body.stream) return json(res, 200, { ...message, usage });
    const event = (type, data) => `${type}\ndata: ${JSON.stringify({ type, ...data })}`;
    res.writeHead(200, { 'content-type': 'text/event-stream' });
    for (const each of [
      event('message_start', { message: { ...message, content: [], stop_reason: null, usage: { input_tokens: 30, output_tokens: 1 } } }),
      event('message_delta', { delta: { stop_reason: 'end_turn', stop_sequence: null }, usage: { output_tokens: output(body) } }),
      event('message_stop', {}),
    ]) res.write(`event: ${each}\n\n`);
    return res.end();
  }
  return json(res, 404, { error: { message: `no ${pathname}` } });
}

before(async () => {
  fake = await serve(answer);
  await putPrice(earmark, 'openai', gpt);
  await putPrice(earmark, 'azure', gpt);
  await putPrice(earmark, 'anthropic', claude);
  // DeepSeek's rates are three times OpenAI's here, so that the provider a call was priced
  // under shows in what it cost.
  await putPrice(earmark, 'deepseek', gpt, { scale: 3 });
});
after(async () => {
  earmark.close();
  await fake.close();
});

async function meteredOn(name, limit = 1_000_000) {
  const id = await usdBudget(earmark, name, limit);
  fake.requests.length = 0;
  const openai = metered(new OpenAI({ baseURL: `${fake.url}/v1`, apiKey: 'sk-fake', maxRetries: 0 }), earmark, id);
  const azure = metered(new AzureOpenAI({ endpoint: fake.url, apiKey: 'azure-key', apiVersion: '2024-10-21', maxRetries: 0 }), earmark, id, {
    deployments: { 'their-gpt': gpt },
  });
  const anthropic = metered(new Anthropic({ baseURL: fake.url, apiKey: 'sk-fake', maxRetries: 0 }), earmark, id);
  return { id, openai, azure, anthropic };
}

const ask = (content) => [{ role: 'user', content }];

test('a PATCH or PUT is refused unsent unless its path is free; reads and deletes pass', async () => {
  const { id, openai, azure, anthropic } = await meteredOn('attack-methods');
  const body = { model: gpt, max_tokens: 100, messages: ask(NEVER_SENT) };
  const writes = {
    'openai PATCH /v1/chat/completions': () => openai.patch('/chat/completions', { body }),
    'openai PUT /v1/chat/completions': () => openai.put('/chat/completions', { body }),
    'openai PUT /v1/images/generations': () => openai.put('/images/generations', { body }),
    'openai PATCH /v1/containers/c1': () => openai.patch('/containers/c1', { body }),
    'azure PATCH /openai/deployments/their-gpt/chat/completions': () => azure.patch('/deployments/their-gpt/chat/completions', { body }),
    'anthropic PATCH /v1/messages': () => anthropic.patch('/v1/messages', { body: { ...body, model: claude } }),
    'anthropic PUT /v1/messages/batches': () => anthropic.put('/v1/messages/batches', { body: { requests: [] } }),
  };
  const wrong = [];
  for (const [named, write] of Object.entries(writes)) {
    const error = await write().catch((e) => e);
    const [, method, path] = named.split(' ');
    if (!(error instanceof EndpointNotMeteredError) || !error.message.includes(`${method} ${path}`)) wrong.push(`${named}: ${error}`);
  }
  assert.deepEqual(wrong, []);
  assert.equal(fake.requests.length, 0);
  // A vector store is a standing cost, its path free; a read and a delete bill nothing.
  await openai.put('/vector_stores/vs_1', { body: { name: 'kept' } });
  await openai.get('/models');
  await anthropic.delete('/v1/files/file_1');
  assert.deepEqual(fake.requests.map((r) => `${r.method} ${r.url.pathname}`), ['PUT /v1/vector_stores/vs_1', 'GET /v1/models', 'DELETE /v1/files/file_1']);
  assert.deepEqual(await ledger(earmark, id), [0, 0, 0]);
});

test('a reported count that is no whole number in bounds leaves the call in doubt, in chat, Responses and Messages', async () => {
  const { id, openai, anthropic } = await meteredOn('attack-counts');
  let prompts = 0;
  for (const kind of Object.keys(BAD)) {
    const prompt = `count:${kind}`;
    prompts += 4 * estimate(prompt.length);
    await openai.chat.completions.create({ model: gpt, max_tokens: 100, messages: ask(prompt) });
    for await (const _ of await openai.chat.completions.create({ model: gpt, max_tokens: 100, messages: ask(prompt), stream: true }));
    await openai.responses.create({ model: gpt, max_output_tokens: 100, input: prompt });
    await anthropic.messages.create({ model: claude, max_tokens: 100, messages: ask(prompt) });
  }
  const streamed = await anthropic.messages.create({ model: claude, max_tokens: 100, messages: ask('count:string'), stream: true });
  for await (const _ of streamed);
  prompts += estimate('count:string'.length);
  const calls = 4 * Object.keys(BAD).length + 1;
  assert.equal(fake.requests.length, calls);
  // Each call's prompt charged, its 100 output tokens still held.
  assert.deepEqual(await ledger(earmark, id), [2 * prompts, calls * 8 * 100, calls]);
});

test("a copy given another base URL is priced under its host's provider; an unknown host is refused", async () => {
  const { id, openai } = await meteredOn('attack-copy-host');
  // The copy's requests are carried to the fake, whatever host its URLs name.
  const toFake = (input, init) => {
    const url = new URL(input instanceof Request ? input.url : String(input));
    return globalThis.fetch(new URL(url.pathname + url.search, fake.url), init);
  };
  const deepseek = openai.withOptions({ baseURL: 'https://api.deepseek.com/v1', fetch: toFake });
  await deepseek.chat.completions.create({ model: gpt, max_completion_tokens: 100, messages: ask('One line on row locks.') });
  // DeepSeek is told its cap as max_tokens.
  assert.equal(JSON.parse(fake.requests[0].body).max_tokens, 100);
  await openai.chat.completions.create({ model: gpt, max_completion_tokens: 100, messages: ask('One line on row locks.') });
  assert.throws(() => openai.withOptions({ baseURL: 'https://llm.example.com/v1' }), ProviderNotNamedError);
  assert.throws(() => deepseek.withOptions({ baseURL: 'https://llm.example.com/v1' }), ProviderNotNamedError);
  // A provider the caller named holds for every copy.
  const named = metered(new OpenAI({ baseURL: `${fake.url}/v1`, apiKey: 'sk-fake', maxRetries: 0 }), earmark, id, { provider: 'openai' });
  await named.withOptions({ baseURL: 'https://llm.example.com/v1', fetch: toFake }).chat.completions.create({ model: gpt, max_tokens: 100, messages: ask('hi') });
  assert.equal(fake.requests.length, 3);
  assert.deepEqual(await ledger(earmark, id), [3 * BILL + BILL + BILL, 0, 0]);
});

test("a billable request to another host than the base URL's is refused unsent; a free one passes", async () => {
  const { id, openai, anthropic } = await meteredOn('attack-absolute-url');
  // The fake under another name than the base URL's 127.0.0.1: were it sent, the fake would see it.
  const elsewhere = fake.url.replace('127.0.0.1', 'localhost');
  const calls = {
    openai: () => openai.post(`${elsewhere}/v1/chat/completions`, { body: { model: gpt, max_tokens: 100, messages: ask(NEVER_SENT) } }),
    anthropic: () => anthropic.post(`${elsewhere}/v1/messages`, { body: { model: claude, max_tokens: 100, messages: ask(NEVER_SENT) } }),
  };
  for (const [named, call] of Object.entries(calls)) {
    const error = await call().catch((e) => e);
    assert.ok(error instanceof EndpointNotMeteredError && error.message.includes('//localhost/v1/'), `${named}: ${error}`);
  }
  // A base URL set on the client to another host is one too: its provider was named by the first.
  openai.baseURL = `${elsewhere}/v1`;
  const moved = await openai.chat.completions.create({ model: gpt, max_tokens: 100, messages: ask(NEVER_SENT) }).catch((e) => e);
  assert.ok(moved instanceof EndpointNotMeteredError && moved.message.includes('//localhost/v1/chat/completions'), String(moved));
  assert.equal(fake.requests.length, 0);
  await openai.put(`${elsewhere}/v1/vector_stores/vs_1`, { body: { name: 'kept' } });
  assert.deepEqual(fake.requests.map((r) => `${r.method} ${r.url.pathname}`), ['PUT /v1/vector_stores/vs_1']);
  assert.deepEqual(await ledger(earmark, id), [0, 0, 0]);
});
