// metered() on @aws-sdk/client-bedrock-runtime's BedrockRuntimeClient (its middleware
// stack) against an in-process fake Bedrock runtime (test/fakes.mjs) that answers as AWS
// publishes Converse, ConverseStream (application/vnd.amazon.eventstream, encoded by the
// SDK's own EventStreamCodec, its metadata event last) and InvokeModel (Anthropic's and Amazon
// Nova's bodies). The client is given a plain HTTP/1.1 handler: its default speaks HTTP/2.
// Every answer bills 30 input tokens, 10 cache reads, 5 cache writes (five-minute) and 20
// output tokens, Bedrock's inputTokens counting neither cache: at the test's rates
// (helpers.mjs) 2 * 30 + 1 * 10 + 3 * 5 + 8 * 20 = 245 micro-dollars.
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import * as bedrockRuntime from '@aws-sdk/client-bedrock-runtime';
import {
  BedrockRuntimeClient,
  ConverseCommand,
  ConverseStreamCommand,
  CountTokensCommand,
  InvokeModelCommand,
  InvokeModelWithResponseStreamCommand,
} from '@aws-sdk/client-bedrock-runtime';
import { EventStreamCodec } from '@smithy/core/event-streams';
import { fromUtf8, toUtf8 } from '@smithy/core/serde';
import { NodeHttpHandler } from '@smithy/node-http-handler';
import { bedrockPriceName } from '../dist/esm/bedrock.js';
import { BEDROCK_COMMANDS, EndpointNotMeteredError, RefusedError, metered } from '../dist/esm/index.js';
import { json, serve } from './fakes.mjs';
import { CEILING, NEVER_SENT, client, ledger, putPrice, usdBudget } from './helpers.mjs';

const earmark = client();
const claude = `anthropic.claude-ts-${process.pid}-v1:0`;
const nova = `amazon.nova-ts-${process.pid}-v1:0`;
const BILL = 2 * 30 + 1 * 10 + 3 * 5 + 8 * 20;
const CONVERSE_USAGE = { inputTokens: 30, outputTokens: 20, totalTokens: 65, cacheReadInputTokens: 10, cacheWriteInputTokens: 5, cacheDetails: [{ ttl: '5m', inputTokens: 5 }] };
// 22 characters: Earmark holds ceil(22 / 3) + 4 + 3 = 15 prompt tokens.
const QUESTION = 'One line on row locks.';
const codec = new EventStreamCodec(toUtf8, fromUtf8);
let fake;
// The budget watched: the fake records its state as each request arrives.
let watched = null;
const states = [];

function event(type, body) {
  const header = (value) => ({ type: 'string', value });
  const headers = { ':event-type': header(type), ':content-type': header('application/json'), ':message-type': header('event') };
  return Buffer.from(codec.encode({ headers, body: fromUtf8(JSON.stringify({ ...body, p: 'abcdefgh' })) }));
}

async function answer(req, res) {
  if (watched !== null) states.push(await earmark.getBudget(watched));
  const [, modelId, operation] = /^\/model\/([^/]+)\/([a-z-]+)$/.exec(req.url.pathname) ?? [];
  const body = JSON.parse(req.body || '{}');
  const text = JSON.stringify(body);
  if (text.includes('fail:400')) return json(res, 400, { message: 'Malformed input request' }, { 'x-amzn-errortype': 'ValidationException' });
  if (text.includes('flaky') && fake.requests.filter((r) => r.body.includes('flaky')).length === 1) {
    return json(res, 500, { message: 'try again' }, { 'x-amzn-errortype': 'InternalServerException' });
  }
  if (text.includes('lost') && fake.requests.filter((r) => r.body.includes('lost')).length === 1) return res.socket.destroy();
  if (operation === 'count-tokens') return json(res, 200, { inputTokens: 15 });
  if (operation === 'converse' && text.includes('count:')) {
    // A count out of shape, as the message names it: "count:string", "count:fraction"...
    const bad = { string: '20', fraction: 20.5, boolean: true, negative: -1, past: 10 ** 12 + 1 }[/count:(\w+)/.exec(text)[1]];
    const output = { message: { role: 'assistant', content: [{ text: 'Row locks.' }] } };
    return json(res, 200, { output, stopReason: 'end_turn', usage: { ...CONVERSE_USAGE, outputTokens: bad }, metrics: { latencyMs: 1 } });
  }
  if (operation === 'converse' && !text.includes('cache-1h')) {
    const output = { message: { role: 'assistant', content: [{ text: 'Row locks.' }] } };
    return json(res, 200, { output, stopReason: 'end_turn', usage: CONVERSE_USAGE, metrics: { latencyMs: 1 } });
  }
  if (operation === 'converse-stream') {
    res.writeHead(200, { 'content-type': 'application/vnd.amazon.eventstream' });
    res.write(event('messageStart', { role: 'assistant' }));
    res.write(event('contentBlockDelta', { contentBlockIndex: 0, delta: { text: 'Row locks.' } }));
    if (text.includes('cut')) return res.socket.destroy();
    res.write(event('messageStop', { stopReason: 'end_turn' }));
    res.end(event('metadata', { usage: CONVERSE_USAGE, metrics: { latencyMs: 1 } }));
    return undefined;
  }
  if (operation === 'invoke-with-response-stream') {
    const chunk = (value) => event('chunk', { bytes: Buffer.from(JSON.stringify(value)).toString('base64') });
    const start = { id: 'msg_bdrk_1', type: 'message', role: 'assistant', model: 'claude', content: [], stop_reason: null, usage: { input_tokens: 30, cache_read_input_tokens: 10, cache_creation_input_tokens: 5, output_tokens: 1 } };
    res.writeHead(200, { 'content-type': 'application/vnd.amazon.eventstream' });
    res.write(chunk({ type: 'message_start', message: start }));
    res.write(chunk({ type: 'content_block_delta', index: 0, delta: { type: 'text_delta', text: 'Row locks.' } }));
    res.write(chunk({ type: 'message_delta', delta: { stop_reason: 'end_turn' }, usage: { output_tokens: 20 } }));
    res.end(chunk({ type: 'message_stop', 'amazon-bedrock-invocationMetrics': { inputTokenCount: 30, outputTokenCount: 20, invocationLatency: 1, firstByteLatency: 1 } }));
    return undefined;
  }
  if (operation === 'converse' && text.includes('cache-1h')) {
    const usage = { ...CONVERSE_USAGE, cacheDetails: [{ ttl: '1h', inputTokens: 5 }] };
    return json(res, 200, { output: { message: { role: 'assistant', content: [{ text: 'Row locks.' }] } }, stopReason: 'end_turn', usage, metrics: { latencyMs: 1 } });
  }
  if (operation === 'invoke' && decodeURIComponent(modelId).startsWith('anthropic.')) {
    const usage = { input_tokens: 30, cache_read_input_tokens: 10, cache_creation_input_tokens: 5, output_tokens: 20 };
    const message = { id: 'msg_bdrk_1', type: 'message', role: 'assistant', model: 'claude', content: [{ type: 'text', text: 'Row locks.' }], stop_reason: 'end_turn', stop_sequence: null, usage };
    return json(res, 200, message, { 'x-amzn-bedrock-input-token-count': '30', 'x-amzn-bedrock-output-token-count': '20' });
  }
  if (operation === 'invoke' && decodeURIComponent(modelId).startsWith('amazon.nova')) {
    const usage = { inputTokens: 30, outputTokens: 20, totalTokens: 65, cacheReadInputTokenCount: 10, cacheWriteInputTokenCount: 5 };
    return json(res, 200, { output: { message: { role: 'assistant', content: [{ text: 'Row locks.' }] } }, stopReason: 'end_turn', usage });
  }
  return json(res, 400, { message: 'unknown operation' }, { 'x-amzn-errortype': 'ValidationException' });
}

before(async () => {
  fake = await serve(answer);
  // An in-region Claude call is priced as genai-prices names it: regional.{id}.
  await putPrice(earmark, 'aws', `regional.${claude}`);
  await putPrice(earmark, 'aws', nova);
  await putPrice(earmark, 'aws', nova, { tier: 'priority', scale: 2 });
});
after(async () => {
  earmark.close();
  await fake.close();
});

async function meteredOn(name, limit, maxAttempts = 1) {
  const id = await usdBudget(earmark, name, limit);
  watched = id;
  states.length = 0;
  fake.requests.length = 0;
  const bedrock = new BedrockRuntimeClient({
    region: 'us-east-1',
    endpoint: fake.url,
    credentials: { accessKeyId: 'AKIDTEST', secretAccessKey: 'secret' },
    requestHandler: new NodeHttpHandler(),
    maxAttempts,
  });
  return { id, bedrock, llm: metered(bedrock, earmark, id) };
}

function atSend() {
  assert.equal(states.length, 1, `one request reached the fake, not ${states.length}`);
  return [states[0].used, states[0].held, states[0].openReservations];
}

const sentBody = () => JSON.parse(fake.requests[0].body);
const messages = (text) => [{ role: 'user', content: [{ text }] }];

test('Converse is held before it is sent and settled at the bill, cache reads and writes at their rates', async () => {
  const { id, bedrock, llm } = await meteredOn('bedrock-converse', 1_000_000);
  assert.equal(llm, bedrock, 'a BedrockRuntimeClient is metered in place');
  const reply = await llm.send(new ConverseCommand({ modelId: claude, messages: messages(QUESTION), inferenceConfig: { maxTokens: 500 } }));
  assert.equal(reply.usage.outputTokens, 20);
  // Held 2 * 15 + 8 * 500, of which the prompt's 30 was charged by the Reserve.
  assert.deepEqual(atSend(), [30, 8 * 500, 1]);
  assert.equal(fake.requests[0].url.pathname, `/model/${encodeURIComponent(claude)}/converse`);
  assert.deepEqual(await ledger(earmark, id), [BILL, 0, 0]);
});

test('Converse with no maximum is told the model ceiling', async () => {
  const { id, llm } = await meteredOn('bedrock-ceiling', 1_000_000);
  await llm.send(new ConverseCommand({ modelId: claude, messages: messages(QUESTION) }));
  assert.deepEqual(atSend(), [30, 8 * CEILING, 1]);
  assert.equal(sentBody().inferenceConfig.maxTokens, CEILING);
  assert.deepEqual(await ledger(earmark, id), [BILL, 0, 0]);
});

test('ConverseStream is settled from its metadata event', async () => {
  const { id, llm } = await meteredOn('bedrock-stream', 1_000_000);
  const reply = await llm.send(new ConverseStreamCommand({ modelId: claude, messages: messages(QUESTION), inferenceConfig: { maxTokens: 500 } }));
  const kinds = [];
  for await (const each of reply.stream) kinds.push(Object.keys(each)[0]);
  assert.deepEqual(kinds, ['messageStart', 'contentBlockDelta', 'messageStop', 'metadata']);
  assert.deepEqual(atSend(), [30, 8 * 500, 1]);
  assert.deepEqual(await ledger(earmark, id), [BILL, 0, 0]);
});

test('a ConverseStream dropped before its metadata is in doubt', async () => {
  const { id, llm } = await meteredOn('bedrock-cut', 1_000_000);
  const error = await (async () => {
    const reply = await llm.send(new ConverseStreamCommand({ modelId: claude, messages: messages('cut'), inferenceConfig: { maxTokens: 100 } }));
    for await (const _ of reply.stream);
  })().catch((e) => e);
  assert.ok(error instanceof Error);
  // "cut": ceil(3 / 3) + 4 + 3 = 8 prompt tokens, charged; the answer's 100 still held.
  assert.deepEqual(await ledger(earmark, id), [2 * 8, 8 * 100, 1]);
});

test('InvokeModel is metered for the Anthropic and Amazon Nova families, capped in their own fields', async () => {
  const anthropic = await meteredOn('bedrock-invoke-anthropic', 1_000_000);
  const body = JSON.stringify({ anthropic_version: 'bedrock-2023-05-31', max_tokens: 500, messages: [{ role: 'user', content: QUESTION }] });
  const reply = await anthropic.llm.send(new InvokeModelCommand({ modelId: claude, body }));
  assert.equal(JSON.parse(new TextDecoder().decode(reply.body)).usage.output_tokens, 20);
  assert.deepEqual(atSend(), [30, 8 * 500, 1]);
  assert.deepEqual(await ledger(earmark, anthropic.id), [BILL, 0, 0]);
  const amazon = await meteredOn('bedrock-invoke-nova', 1_000_000);
  const request = { schemaVersion: 'messages-v1', messages: messages(QUESTION), inferenceConfig: {} };
  await amazon.llm.send(new InvokeModelCommand({ modelId: nova, body: new TextEncoder().encode(JSON.stringify(request)) }));
  // No maximum: Nova 1's max_new_tokens is told the ceiling.
  assert.equal(sentBody().inferenceConfig.max_new_tokens, CEILING);
  assert.deepEqual(atSend(), [30, 8 * CEILING, 1]);
  assert.deepEqual(await ledger(earmark, amazon.id), [BILL, 0, 0]);
});

test('every command is refused before sending on an empty budget, and an unknown family always', async () => {
  const { id, llm } = await meteredOn('bedrock-empty', 0);
  const body = JSON.stringify({ anthropic_version: 'bedrock-2023-05-31', max_tokens: 50, messages: [{ role: 'user', content: NEVER_SENT }] });
  const calls = {
    converse: () => llm.send(new ConverseCommand({ modelId: claude, messages: messages(NEVER_SENT) })),
    stream: () => llm.send(new ConverseStreamCommand({ modelId: claude, messages: messages(NEVER_SENT) })),
    invoke: () => llm.send(new InvokeModelCommand({ modelId: claude, body })),
  };
  for (const [surface, call] of Object.entries(calls)) {
    const error = await call().catch((e) => e);
    assert.ok(error instanceof RefusedError, `${surface}: ${error}`);
  }
  const llama = await llm.send(new InvokeModelCommand({ modelId: 'meta.llama3-8b-instruct-v1:0', body: JSON.stringify({ prompt: NEVER_SENT, max_gen_len: 50 }) })).catch((e) => e);
  assert.ok(llama instanceof EndpointNotMeteredError, String(llama));
  assert.equal(fake.requests.length, 0);
  assert.deepEqual(await ledger(earmark, id), [0, 0, 0]);
  const counted = await llm.send(new CountTokensCommand({ modelId: claude, input: { converse: { messages: messages(QUESTION) } } }));
  assert.equal(counted.inputTokens, 15, 'counting tokens passes free');
});

test('a streamed Anthropic invoke settles at message_delta usage, cache writes at their rate', async () => {
  const { id, llm } = await meteredOn('bedrock-invoke-stream', 1_000_000);
  const body = JSON.stringify({ anthropic_version: 'bedrock-2023-05-31', max_tokens: 500, messages: [{ role: 'user', content: QUESTION }] });
  const reply = await llm.send(new InvokeModelWithResponseStreamCommand({ modelId: claude, body }));
  const types = [];
  for await (const each of reply.body) types.push(JSON.parse(new TextDecoder().decode(each.chunk.bytes)).type);
  assert.deepEqual(types, ['message_start', 'content_block_delta', 'message_delta', 'message_stop']);
  assert.deepEqual(atSend(), [30, 8 * 500, 1]);
  assert.deepEqual(await ledger(earmark, id), [BILL, 0, 0]);
});

test('one-hour cache writes (cacheDetails) are priced at their own rate', async () => {
  const { id, llm } = await meteredOn('bedrock-cache-1h', 1_000_000);
  await llm.send(new ConverseCommand({ modelId: claude, messages: messages('cache-1h'), inferenceConfig: { maxTokens: 500 } }));
  assert.deepEqual(await ledger(earmark, id), [2 * 30 + 1 * 10 + 4 * 5 + 8 * 20, 0, 0]);
});

test('the SDK retries a 5xx inside the one hold, which an answer after it leaves in doubt; a 4xx settles at nothing', async () => {
  const { id, llm } = await meteredOn('bedrock-retry', 1_000_000, 2);
  const reply = await llm.send(new ConverseCommand({ modelId: claude, messages: messages('flaky'), inferenceConfig: { maxTokens: 500 } }));
  assert.equal(reply.usage.outputTokens, 20);
  assert.equal(fake.requests.length, 2);
  // AWS may have run the attempt that answered 500 too: "flaky", ceil(5 / 3) + 4 + 3 = 9
  // prompt tokens, charged; the answer's 500 still held.
  assert.deepEqual(await ledger(earmark, id), [2 * 9, 8 * 500, 1]);
  // So does an attempt lost after it was sent: "lost", ceil(4 / 3) + 4 + 3 = 9 prompt tokens.
  const lost = await meteredOn('bedrock-lost', 1_000_000, 2);
  await lost.llm.send(new ConverseCommand({ modelId: claude, messages: messages('lost'), inferenceConfig: { maxTokens: 500 } }));
  assert.equal(fake.requests.length, 2);
  assert.deepEqual(await ledger(earmark, lost.id), [2 * 9, 8 * 500, 1]);
  const rejected = await meteredOn('bedrock-400', 1_000_000);
  const error = await rejected.llm.send(new ConverseCommand({ modelId: claude, messages: messages('fail:400'), inferenceConfig: { maxTokens: 500 } })).catch((e) => e);
  assert.equal(error.name, 'ValidationException');
  assert.deepEqual(await ledger(earmark, rejected.id), [0, 0, 0]);
});

test('a Nova invoke asking for the priority tier is held and settled at its price row', async () => {
  const { id, llm } = await meteredOn('bedrock-nova-priority', 1_000_000);
  const request = { schemaVersion: 'messages-v1', messages: messages(QUESTION), inferenceConfig: { max_new_tokens: 500 } };
  await llm.send(new InvokeModelCommand({ modelId: nova, serviceTier: 'priority', body: JSON.stringify(request) }));
  assert.equal(fake.requests[0].headers['x-amzn-bedrock-service-tier'], 'priority');
  // The priority row's rates are twice the default's.
  assert.deepEqual(atSend(), [2 * 30, 2 * 8 * 500, 1]);
  assert.deepEqual(await ledger(earmark, id), [2 * BILL, 0, 0]);
});

test('a usage count that is no whole number in bounds leaves the call in doubt', async () => {
  const kinds = ['string', 'fraction', 'boolean', 'negative', 'past'];
  const { id, llm } = await meteredOn('bedrock-bad-count', 1_000_000);
  for (const kind of kinds) {
    await llm.send(new ConverseCommand({ modelId: claude, messages: messages(`count:${kind}`), inferenceConfig: { maxTokens: 100 } }));
  }
  // "count:string"... each held ceil(len / 3) + 4 + 3 prompt tokens, charged; its 100 still held.
  const prompts = kinds.map((kind) => Math.ceil(`count:${kind}`.length / 3) + 7).reduce((a, b) => a + b);
  assert.deepEqual(await ledger(earmark, id), [2 * prompts, kinds.length * 8 * 100, kinds.length]);
});

test('every command of the package is classified, and the refused ones are refused unsent', async () => {
  const commands = Object.keys(bedrockRuntime).filter((name) => /^[A-Z]\w*Command$/.test(name));
  assert.deepEqual(commands.filter((name) => !Object.hasOwn(BEDROCK_COMMANDS, name)), [], 'a command of the package is not in BEDROCK_COMMANDS');
  const { id, llm } = await meteredOn('bedrock-refused', 1_000_000);
  const refused = Object.keys(BEDROCK_COMMANDS).filter((name) => BEDROCK_COMMANDS[name] === 'refused');
  for (const name of refused) {
    const error = await llm.send(new bedrockRuntime[name]({ modelId: claude })).catch((e) => e);
    assert.ok(error instanceof EndpointNotMeteredError, `${name}: ${error}`);
  }
  assert.deepEqual([refused.length, fake.requests.length], [4, 0]);
  assert.deepEqual(await ledger(earmark, id), [0, 0, 0]);
});

test('a modelId is priced under the name genai-prices gives it, as the Python SDK names it', () => {
  const claude35 = 'anthropic.claude-3-5-haiku-20241022-v1:0';
  const priced = `regional.${claude35}`;
  const profile = 'arn:aws:bedrock:us-east-1:123456789012:application-inference-profile/abc123';
  const names = {
    [claude35]: priced,
    [`us.${claude35}`]: priced,
    [`eu.${claude35}`]: priced,
    [`us-gov.${claude35}`]: priced,
    [`global.${claude35}`]: `global.${claude35}`,
    'amazon.nova-lite-v1:0': 'amazon.nova-lite-v1:0',
    'us.amazon.nova-lite-v1:0': 'amazon.nova-lite-v1:0',
    'amazon.nova-2-lite-v1:0': 'regional.amazon.nova-2-lite-v1:0',
    'global.amazon.nova-2-lite-v1:0': 'global.amazon.nova-2-lite-v1:0',
    'meta.llama3-8b-instruct-v1:0': 'meta.llama3-8b-instruct-v1:0',
    [`arn:aws:bedrock:us-east-1::foundation-model/${claude35}`]: priced,
    [`arn:aws:bedrock:us-east-1:123456789012:inference-profile/eu.${claude35}`]: priced,
    [profile]: profile,
  };
  const named = Object.fromEntries(Object.keys(names).map((id) => [id, bedrockPriceName(id)]));
  assert.deepEqual(names, named);
});
