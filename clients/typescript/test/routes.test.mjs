// The wire rules on their own, without a sidecar or a provider: which requests bill, what a
// billable one is held for, the cap it is sent with, the usage read from answers and
// streams, and how a server-sent event stream is split.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { anthropicRouting } from '../dist/esm/routes-anthropic.js';
import { openaiRouting } from '../dist/esm/routes-openai.js';
import { FREE, REFUSED, Routes, capToSend, shapeOf } from '../dist/esm/routes.js';
import { Events } from '../dist/esm/sse.js';

const settings = { toolCallsMax: 10 };
const kind = (route) => (route === FREE ? 'free' : route === null ? 'refused' : 'metered');

test('OpenAI POST paths route to metered, free or refused', () => {
  const paths = {
    '/v1/chat/completions': 'metered',
    '/v1/responses': 'metered',
    '/v1/embeddings': 'metered',
    '/v1/chat/completions/chatcmpl-1': 'free',
    '/v1/responses/input_tokens': 'free',
    '/v1/responses/resp_1/cancel': 'free',
    '/v1/moderations': 'free',
    '/v1/files': 'free',
    '/v1/uploads/upload_1/parts': 'free',
    '/v1/vector_stores/vs_1/files': 'free',
    '/v1/conversations/conv_1/items': 'free',
    '/v1/batches/batch_1/cancel': 'free',
    '/v1/fine_tuning/jobs/ftjob-1/cancel': 'free',
    '/v1/fine_tuning/jobs/ftjob-1/pause': 'free',
    '/v1/images/generations': 'refused',
    '/v1/audio/speech': 'refused',
    '/v1/completions': 'refused',
    '/v1/batches': 'refused',
    '/v1/fine_tuning/jobs': 'refused',
    '/v1/responses/compact': 'refused',
    '/v1/vector_stores/vs_1/search': 'refused',
    '/v1/threads/runs': 'refused',
    '/v1/realtime/client_secrets': 'refused',
    '/v1/something/new': 'refused',
  };
  assert.deepEqual(Object.fromEntries(Object.keys(paths).map((p) => [p, kind(openaiRouting(p))])), paths);
});

test('Anthropic POST paths route to metered, free or refused', () => {
  const paths = {
    '/v1/messages': 'metered',
    '/v1/messages/count_tokens': 'free',
    '/v1/messages/batches/msgbatch_1/cancel': 'free',
    '/v1/files': 'free',
    '/v1/messages/batches': 'refused',
    '/v1/complete': 'refused',
    '/v1/skills/s/files': 'refused',
    '/v1/something/new': 'refused',
  };
  assert.deepEqual(Object.fromEntries(Object.keys(paths).map((p) => [p, kind(anthropicRouting(p))])), paths);
});

test('the doors of issue 42 are refused and a path is matched whole after the base URL path', () => {
  // Resuming a fine-tuning job restarts paid training; a container's files were free as
  // anything ending in files/...; a dot segment or another prefix is no listed path.
  const refused = [
    '/v1/fine_tuning/jobs/ftjob-1/resume', '/v1/containers', '/v1/containers/cntr_1/files',
    '/v1/containers/cntr_1/files/f/content', '/v1/files/../fine_tuning/jobs', '/v2/files',
    '/v1/vector_stores/..', '/v1/vector_stores/.', '/v1/files/', '/v1/evals/e/files', '/files',
    '/v1/chat/completions/a/b', '/v1/uploads//parts', '/v1x/files', '/v1/deployments/d/../files',
  ];
  assert.deepEqual(refused.map((p) => kind(openaiRouting(p))), refused.map(() => 'refused'));
  assert.deepEqual(
    [openaiRouting('/v1/files'), openaiRouting('/openai/v1/files', '/openai/v1'), openaiRouting('/v1/fine_tuning/jobs/ftjob-1/pause')],
    [FREE, FREE, FREE],
  );
  const chat = openaiRouting('/v1/chat/completions');
  assert.deepEqual(
    [openaiRouting('/openai/deployments/gpt-4o/chat/completions', '/openai'), openaiRouting('/proxy/v1/chat/completions', '/proxy/v1'), openaiRouting('/chat/completions', '')],
    [chat, chat, chat],
  );
  assert.deepEqual(
    [anthropicRouting('/v1/messages/batches'), anthropicRouting('/v1/skills/s/files'), anthropicRouting('/v1/files'), anthropicRouting('/anthropic/v1/messages', '/anthropic')],
    [null, null, FREE, anthropicRouting('/v1/messages')],
  );
});

test('only a refusal takes a whole area, and a path starts with /', () => {
  assert.throws(() => new Routes({ '/files/**': FREE }), /only REFUSED takes a whole area/);
  assert.throws(() => new Routes({ 'files': FREE }), /a path starts with \//);
  // A literal segment is preferred to an id, an id to an area's rest.
  const routes = new Routes({ '/t/{id}': FREE, '/t/runs': REFUSED, '/t/**': REFUSED, '/t/{id}/x': FREE });
  assert.deepEqual(['/t/a', '/t/runs', '/t/a/x', '/t/a/y', '/u'].map((p) => routes.find(p)), [FREE, REFUSED, FREE, REFUSED, null]);
});

test('a chat request is read for its model, prompt, maximum, choices, stream and tier', () => {
  const body = {
    model: 'gpt-4o',
    messages: [
      { role: 'system', content: 'Be brief.' },
      { role: 'user', content: [{ type: 'text', text: 'One line on row locks.' }], name: 'ann' },
    ],
    max_tokens: 300,
    max_completion_tokens: 200,
    n: 2,
    stream: true,
    service_tier: 'priority',
  };
  // 9 + 22 + 3 characters: ceil(34 / 3) + 2 * 4 + 3 = 23 tokens.
  assert.deepEqual(openaiRouting('/v1/chat/completions').call(body, settings), {
    model: 'gpt-4o', promptTokens: 23, asked: 200, choices: 2, stream: true, serviceTier: 'priority',
    toolCallsMax: {}, hasOutput: true,
  });
});

test('the default tier goes by its empty name whatever the request calls it', () => {
  const tiers = ['auto', 'default', undefined].map((service_tier) =>
    openaiRouting('/v1/chat/completions').call({ model: 'm', messages: [], service_tier }, settings).serviceTier);
  assert.deepEqual(tiers, ['', '', '']);
});

test('a Responses request holds its built-in tools by kind, at max_tool_calls or the default', () => {
  const route = openaiRouting('/v1/responses');
  const tools = [{ type: 'web_search_preview' }, { type: 'file_search' }, { type: 'function', name: 'f' }];
  assert.deepEqual(route.call({ model: 'm', input: 'hi', tools }, settings).toolCallsMax, { web_search: 10, file_search: 10 });
  assert.deepEqual(route.call({ model: 'm', input: 'hi', tools, max_tool_calls: 3 }, settings).toolCallsMax, { web_search: 3, file_search: 3 });
  // Items: a message, a call and its output: 5 + 8 + 2 characters, 3 items.
  const input = [
    { role: 'user', content: 'hello' },
    { type: 'function_call', arguments: '{"a": 1}' },
    { type: 'function_call_output', output: 'ok' },
  ];
  assert.equal(route.call({ model: 'm', input, instructions: 'Be brief.' }, settings).promptTokens, Math.ceil(24 / 3) + 12 + 3);
});

test('an embeddings request holds its inputs: text as a prompt, token ids one each', () => {
  const route = openaiRouting('/v1/embeddings');
  assert.equal(route.call({ model: 'm', input: 'abcdef' }, settings).promptTokens, 2 + 3);
  assert.equal(route.call({ model: 'm', input: [1, 2, 3, 4] }, settings).promptTokens, 4);
  assert.equal(route.call({ model: 'm', input: ['abc', [5, 6]] }, settings).promptTokens, 1 + 3 + 2);
});

test('an Anthropic request holds its system, blocks, tool results and web searches', () => {
  const body = {
    model: 'claude',
    system: 'Be brief.',
    max_tokens: 1024,
    messages: [
      { role: 'user', content: 'hello' },
      { role: 'assistant', content: [{ type: 'tool_use', id: 't', name: 'f', input: { a: 1 } }] },
      { role: 'user', content: [{ type: 'tool_result', tool_use_id: 't', content: 'result' }, { type: 'image', source: { type: 'base64', data: 'A'.repeat(9_000) } }] },
    ],
    tools: [{ type: 'web_search_20250305', name: 'web_search', max_uses: 4 }, { type: 'web_fetch_20250910', name: 'web_fetch' }],
    service_tier: 'standard_only',
  };
  const tools = JSON.stringify(body.tools).length;
  // 9 (system) + 5 + 7 ({"a":1}) + 6 (the tool result); the image's data is not counted.
  const call = anthropicRouting('/v1/messages').call(body, settings);
  assert.deepEqual(call, {
    model: 'claude', promptTokens: Math.ceil((27 + tools) / 3) + 3 * 4 + 3, asked: 1024, choices: 1, stream: false,
    serviceTier: '', toolCallsMax: { web_search: 4 }, hasOutput: true,
  });
});

test('the shape holds the caller maximum times the choices, or the model ceiling', () => {
  const call = { model: 'm', promptTokens: 15, asked: 100, choices: 3, stream: false, serviceTier: '', toolCallsMax: {}, hasOutput: true };
  assert.deepEqual(shapeOf('openai', call, null).shape, {
    provider: 'openai', model: 'm', inputTokens: 15, maxOutputTokens: 300, serviceTier: '', maxToolCalls: {}, outputCeiling: false,
  });
  assert.deepEqual(shapeOf('openai', call, 40).shape.maxOutputTokens, 120);
  const open = shapeOf('openai', { ...call, asked: null }, null);
  assert.deepEqual([open.shape.maxOutputTokens, open.shape.outputCeiling], [0, true]);
  assert.deepEqual(open.charge, { inputTokens: 15, outputTokens: 0, provider: 'openai', model: 'm' });
  assert.deepEqual(shapeOf('openai', { ...call, asked: null }, 64).shape.maxOutputTokens, 192);
});

test('the cap sent is the hold output per choice when the caller set none, or when it was lowered', () => {
  const call = { model: 'm', promptTokens: 1, asked: 500, choices: 2, stream: false, serviceTier: '', toolCallsMax: {}, hasOutput: true };
  assert.deepEqual(
    [
      capToSend(call, 1_000, false),
      capToSend(call, 250, true),
      capToSend(call, 600, false),
      capToSend({ ...call, asked: null }, 4_096, false),
      capToSend({ ...call, choices: 3, asked: null }, 2, false),
      capToSend({ ...call, hasOutput: false }, 0, false),
    ],
    [null, 125, 300, 2_048, 0, null],
  );
});

test('a chat answer usage carries its cache reads and writes, and its tier', () => {
  const answer = {
    service_tier: 'priority',
    usage: { prompt_tokens: 120, completion_tokens: 30, prompt_tokens_details: { cached_tokens: 64, cache_write_tokens: 16 } },
  };
  assert.deepEqual(openaiRouting('/v1/chat/completions').usage(answer), {
    inputTokens: 120, outputTokens: 30, cachedInputTokens: 64, cacheWriteInputTokens: 16, serviceTier: 'priority',
  });
});

test("DeepSeek's cache hits are read as cache reads, before a zero cached_tokens", () => {
  // DeepSeek's usage (api-docs.deepseek.com): prompt_cache_hit_tokens and
  // prompt_cache_miss_tokens of prompt_tokens; OpenAI's cached_tokens absent or 0.
  const usage = (extra) => ({ prompt_tokens: 1_000, completion_tokens: 200, prompt_cache_miss_tokens: 360, ...extra });
  const route = openaiRouting('/chat/completions', '');
  const read = [
    { prompt_cache_hit_tokens: 640 },
    { prompt_cache_hit_tokens: 640, prompt_tokens_details: { cached_tokens: 0 } },
  ].map((extra) => route.usage({ usage: usage(extra) }).cachedInputTokens);
  assert.deepEqual(read, [640, 640]);
});

test('cache reads out of their shape are priced as input, and a tier the sidecar would refuse as the held one', () => {
  const route = openaiRouting('/v1/chat/completions');
  const hits = [1_001, -5, '800', 800.5, true].map(
    (prompt_cache_hit_tokens) => route.usage({ usage: { prompt_tokens: 1_000, completion_tokens: 1, prompt_cache_hit_tokens } }).cachedInputTokens,
  );
  const both = route.usage({ usage: { prompt_tokens: 100, completion_tokens: 1, prompt_tokens_details: { cached_tokens: 80, cache_write_tokens: 40 } } });
  const tiers = ['default', 'flex', 'not a tier', 'x'.repeat(33), 7].map((service_tier) =>
    route.usage({ service_tier, usage: { prompt_tokens: 1, completion_tokens: 1 } }).serviceTier);
  const responses = openaiRouting('/v1/responses').usage({
    service_tier: 'é', usage: { input_tokens: 10, output_tokens: 1, input_tokens_details: { cached_tokens: 8, cache_write_tokens: 4 } },
  });
  assert.deepEqual(
    [hits, [both.cachedInputTokens, both.cacheWriteInputTokens], tiers, [responses.cachedInputTokens, responses.cacheWriteInputTokens, responses.serviceTier]],
    [[0, 0, 0, 0, 0], [0, 40], ['default', 'flex', '', '', ''], [0, 4, '']],
  );
});

test('a Responses answer usage counts its built-in tool calls from its output items', () => {
  const answer = {
    service_tier: 'default',
    output: [{ type: 'web_search_call' }, { type: 'web_search_call' }, { type: 'code_interpreter_call' }, { type: 'message' }],
    usage: { input_tokens: 10, output_tokens: 5, input_tokens_details: { cached_tokens: 2 } },
  };
  assert.deepEqual(openaiRouting('/v1/responses').usage(answer), {
    inputTokens: 10, outputTokens: 5, cachedInputTokens: 2, cacheWriteInputTokens: 0, serviceTier: 'default',
    toolCalls: { web_search: 2, code_interpreter: 1 },
  });
});

test('an Anthropic stream usage is message_start merged with the cumulative message_delta', () => {
  const tally = anthropicRouting('/v1/messages').tally();
  tally.keep('message_start', {
    type: 'message_start',
    message: { usage: { input_tokens: 4, cache_read_input_tokens: 40, cache_creation_input_tokens: 100, cache_creation: { ephemeral_1h_input_tokens: 100 }, output_tokens: 1, service_tier: 'standard' } },
  });
  assert.equal(tally.usage(), null);
  tally.keep('message_delta', {
    type: 'message_delta',
    usage: { input_tokens: 504, cache_read_input_tokens: null, output_tokens: 309, server_tool_use: { web_search_requests: 1 } },
  });
  assert.deepEqual(tally.usage(), {
    inputTokens: 504 + 100 + 40, outputTokens: 309, cachedInputTokens: 40, cacheWriteInputTokens: 100,
    cacheWriteLongInputTokens: 100, serviceTier: 'standard', toolCalls: { web_search: 1 },
  });
});

test('a chat stream tally hides the usage chunk only when Earmark asked for it', () => {
  const usageChunk = { choices: [], service_tier: 'default', usage: { prompt_tokens: 6, completion_tokens: 3 } };
  const hidden = openaiRouting('/v1/chat/completions').tally(null, true);
  const shown = openaiRouting('/v1/chat/completions').tally(null, false);
  assert.deepEqual([hidden.keep('', { choices: [{ index: 0 }], usage: null }), hidden.keep('', usageChunk), shown.keep('', usageChunk)], [true, false, true]);
  assert.deepEqual(hidden.usage(), { inputTokens: 6, outputTokens: 3, cachedInputTokens: 0, cacheWriteInputTokens: 0, serviceTier: 'default' });
});

test('server-sent events are split across chunks and line ends, and dropped events are left out', () => {
  const seen = [];
  const events = new Events({
    keep: (name, data) => (seen.push([name, data]), data.drop !== true),
    usage: () => null,
  });
  const encode = (text) => new TextEncoder().encode(text);
  const decode = (bytes) => new TextDecoder().decode(bytes);
  const out = [
    decode(events.feed(encode('event: a\r\ndata: {"n": 1}\r'))),
    decode(events.feed(encode('\n\r\ndata: {"drop": true}\n\ndata: [DONE]\n\ndata: {"n"'))),
    decode(events.feed(encode(': 2}'))),
    decode(events.rest()),
  ];
  assert.deepEqual(out, ['', 'event: a\ndata: {"n": 1}\n\ndata: [DONE]\n\n', '', 'data: {"n": 2}']);
  assert.deepEqual(seen, [['a', { n: 1 }], ['', { drop: true }], ['', { n: 2 }]]);
});
