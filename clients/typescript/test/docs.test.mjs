// The Azure OpenAI, Gemini, Bedrock and AI SDK workers of docs/sdk-typescript.md, run
// exactly as they stand: each is written into a fresh folder whose node_modules links this
// package (as @earmark/client) and the provider's package, and run by node with the
// provider's own environment variables pointing at a fake, against the live sidecar, its
// budget and a price for its model put first. Azure, Gemini and Bedrock are in-process fakes
// (Bedrock's speaks HTTP/2 without TLS, as the client's default handler does); the AI SDK
// worker calls the fake Anthropic of tests/fake_anthropic.py. Each worker names no maximum:
// its provider is told the model's ceiling, and the budget is charged what the fake billed.
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { mkdirSync, mkdtempSync, readFileSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import http2 from 'node:http2';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { after, before, test } from 'node:test';
import { json, serve } from './fakes.mjs';
import { CEILING, FAKE_ANTHROPIC_URL, client, ledger, putPrice } from './helpers.mjs';

const PACKAGE = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');
const DOC = path.resolve(PACKAGE, '..', '..', 'docs', 'sdk-typescript.md');
const PEERS = ['openai', '@google/genai', '@aws-sdk/client-bedrock-runtime', 'ai', '@ai-sdk/anthropic'];
const run = promisify(execFile);
const earmark = client();
let folder;
const fakes = [];
// What each fake was sent: the request bodies.
const sent = { azure: [], gemini: [], bedrock: [] };

/** The js block of the doc between the markers name:start and name:end. */
function docBlock(name) {
  const found = new RegExp(`<!-- ${name}:start -->\\n\`\`\`js\\n([\\s\\S]*?)\`\`\`\\n<!-- ${name}:end -->`).exec(readFileSync(DOC, 'utf8'));
  assert.ok(found, `docs/sdk-typescript.md lost its ${name} markers`);
  return found[1];
}

function link(name, target) {
  const at = path.join(folder, 'node_modules', name);
  mkdirSync(path.dirname(at), { recursive: true });
  symlinkSync(target, at, 'dir');
}

/** Runs the doc's worker name with env (beside the sidecar's address); answers its stdout. */
async function worker(name, env) {
  const file = path.join(folder, `${name}.mjs`);
  writeFileSync(file, docBlock(name));
  const base = { PATH: process.env.PATH, EARMARK_TARGET: process.env.EARMARK_TARGET };
  const { stdout } = await run(process.execPath, [file], { cwd: folder, env: { ...base, ...env }, timeout: 60_000 });
  return stdout.trim();
}

async function h2(handle) {
  const server = http2.createServer((req, res) => {
    let body = '';
    req.on('data', (chunk) => (body += chunk));
    req.on('end', () => handle(req, body, res));
  });
  await new Promise((resolve) => server.listen(0, '127.0.0.1', resolve));
  return { url: `http://127.0.0.1:${server.address().port}`, close: () => new Promise((resolve) => server.close(resolve)) };
}

before(async () => {
  folder = mkdtempSync(path.join(os.tmpdir(), 'earmark-docs-'));
  writeFileSync(path.join(folder, 'package.json'), '{"name": "app", "private": true, "type": "module"}\n');
  link('@earmark/client', PACKAGE);
  for (const peer of PEERS) link(peer, path.join(PACKAGE, 'node_modules', peer));
});
after(async () => {
  earmark.close();
  await Promise.all(fakes.map((fake) => fake.close()));
  rmSync(folder, { recursive: true, force: true });
});

test('the Azure OpenAI worker prices its deployment as its base model', async () => {
  const fake = await serve((req, res) => {
    sent.azure.push({ path: req.url.pathname, version: req.url.searchParams.get('api-version'), body: JSON.parse(req.body) });
    const usage = { prompt_tokens: 40, completion_tokens: 20, total_tokens: 60, prompt_tokens_details: { cached_tokens: 10 } };
    const choice = { index: 0, message: { role: 'assistant', content: 'Row locks.' }, finish_reason: 'stop' };
    json(res, 200, { id: 'c1', object: 'chat.completion', created: 1, model: 'gpt-4o-mini', choices: [choice], usage });
  });
  fakes.push(fake);
  await earmark.putBudget('job-150', 5_000_000, 'usd_micros');
  await putPrice(earmark, 'azure', 'gpt-4o-mini');
  const out = await worker('ts-azure-worker', { AZURE_OPENAI_ENDPOINT: fake.url, AZURE_OPENAI_API_KEY: 'azure-key', OPENAI_API_VERSION: '2024-10-21' });
  assert.equal(out, 'answered: 40 20');
  const [{ path: at, version, body }] = sent.azure;
  assert.deepEqual([at, version, body.max_completion_tokens], ['/openai/deployments/prod-mini/chat/completions', '2024-10-21', CEILING]);
  // 30 plain input, 10 cache reads, 20 output at the test's rates.
  assert.deepEqual(await ledger(earmark, 'job-150'), [2 * 30 + 1 * 10 + 8 * 20, 0, 0]);
});

test('the Gemini worker settles its thinking as output', async () => {
  const fake = await serve((req, res) => {
    sent.gemini.push({ path: req.url.pathname, body: JSON.parse(req.body) });
    const usage = { promptTokenCount: 40, cachedContentTokenCount: 10, candidatesTokenCount: 20, thoughtsTokenCount: 30, totalTokenCount: 90 };
    json(res, 200, { candidates: [{ content: { parts: [{ text: 'Row locks.' }], role: 'model' }, finishReason: 'STOP', index: 0 }], usageMetadata: usage });
  });
  fakes.push(fake);
  await earmark.putBudget('job-151', 5_000_000, 'usd_micros');
  await putPrice(earmark, 'google', 'gemini-2.5-flash');
  const out = await worker('ts-gemini-worker', { GEMINI_API_KEY: 'gemini-key', GOOGLE_GEMINI_BASE_URL: fake.url });
  assert.equal(out, 'generated: 40 50');
  const [{ path: at, body }] = sent.gemini;
  assert.deepEqual([at, body.generationConfig.maxOutputTokens], ['/v1beta/models/gemini-2.5-flash:generateContent', CEILING]);
  // 30 plain input, 10 cached, 20 + 30 output.
  assert.deepEqual(await ledger(earmark, 'job-151'), [2 * 30 + 1 * 10 + 8 * 50, 0, 0]);
});

test('the Bedrock worker, on the client default HTTP/2 handler, settles Converse at its usage', async () => {
  const fake = await h2((req, body, res) => {
    sent.bedrock.push({ path: req.url, body: JSON.parse(body) });
    const usage = { inputTokens: 30, outputTokens: 20, totalTokens: 65, cacheReadInputTokens: 10, cacheWriteInputTokens: 5 };
    res.writeHead(200, { 'content-type': 'application/json' });
    res.end(JSON.stringify({ output: { message: { role: 'assistant', content: [{ text: 'Row locks.' }] } }, stopReason: 'end_turn', usage, metrics: { latencyMs: 1 } }));
  });
  fakes.push(fake);
  const model = 'anthropic.claude-haiku-4-5-20251001-v1:0';
  await earmark.putBudget('job-152', 5_000_000, 'usd_micros');
  // An in-region call, priced as genai-prices (and `earmark prices import`) names it.
  await putPrice(earmark, 'aws', `regional.${model}`);
  const out = await worker('ts-bedrock-worker', {
    AWS_REGION: 'us-east-1',
    AWS_ACCESS_KEY_ID: 'AKIDTEST',
    AWS_SECRET_ACCESS_KEY: 'secret',
    AWS_ENDPOINT_URL_BEDROCK_RUNTIME: fake.url,
    AWS_CONFIG_FILE: '/dev/null',
    AWS_SHARED_CREDENTIALS_FILE: '/dev/null',
  });
  assert.equal(out, 'conversed: 30 20');
  const [{ path: at, body }] = sent.bedrock;
  assert.deepEqual([at, body.inferenceConfig.maxTokens], [`/model/${encodeURIComponent(model)}/converse`, CEILING]);
  // 30 plain input, 10 cache reads, 5 cache writes, 20 output.
  assert.deepEqual(await ledger(earmark, 'job-152'), [2 * 30 + 1 * 10 + 3 * 5 + 8 * 20, 0, 0]);
});

test('the AI SDK worker settles an Anthropic model at the usage the AI SDK reports', async () => {
  assert.ok(FAKE_ANTHROPIC_URL, 'FAKE_ANTHROPIC_URL is set by tests/clients/test_typescript.py');
  await earmark.putBudget('job-153', 5_000_000, 'usd_micros');
  await putPrice(earmark, 'anthropic', 'claude-haiku-4-5');
  const out = await worker('ts-ai-sdk-worker', { ANTHROPIC_API_KEY: 'sk-fake', ANTHROPIC_BASE_URL: `${FAKE_ANTHROPIC_URL}/v1` });
  // "One line on row locks.": the fake bills floor(22 / 4) + 1 = 6 input tokens, and 300
  // output tokens, under the ceiling it was told.
  assert.equal(out, 'generated: 6 300');
  assert.deepEqual(await ledger(earmark, 'job-153'), [2 * 6 + 8 * 300, 0, 0]);
});
