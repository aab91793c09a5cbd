// A metered OpenAI client opens nothing Earmark cannot meter: each websocket class of the
// openai package (OPENAI_SOCKETS, which must list every module of the installed package
// that opens one) given a metered client throws SocketNotMeteredError naming it before it
// connects, as do its copies; a socket or a request built from the metered client's baseURL
// past the classes goes nowhere; the client's own requests still reach the provider's URL.
// Each test points the clients at a socket listening on 127.0.0.1, which must have accepted
// no connection (the same classes given the unmetered client connect to it). No sidecar: no
// request here is billable (the Python SDK's tests/client/test_sockets.py, for Node).
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { once } from 'node:events';
import { readdirSync, readFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import net from 'node:net';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { after, before, test } from 'node:test';
import OpenAI, { AzureOpenAI } from 'openai';
import * as ws from 'ws';
import { EarmarkClient, EndpointNotMeteredError, SocketNotMeteredError, metered } from '../dist/esm/index.js';
import { NOT_METERED_SCHEME } from '../dist/esm/metered.js';
import { OPENAI_SOCKETS } from '../dist/esm/routes-openai.js';

// A sidecar address nothing listens on: nothing here is held.
const NO_SIDECAR = '127.0.0.1:9';
// How long a connection that is made is waited for, and how long one that must not be: a
// socket to 127.0.0.1 is accepted within milliseconds of being opened.
const CONNECT_MS = 2_000;
const NO_CONNECTION_MS = 250;
// What opens a websocket in the package's modules: ws's class, or the platform's.
const OPENS_SOCKET = /\bnew (?:WS\.)?WebSocket\(/;

const earmark = new EarmarkClient({ target: NO_SIDECAR, adminTarget: NO_SIDECAR });
const TEST_DIR = path.dirname(fileURLToPath(import.meta.url));
// The package's folder: its main module is at its root.
const PACKAGE = path.dirname(createRequire(import.meta.url).resolve('openai'));
let server;
let port;
let accepted = 0;
// Node 20 has no WebSocket of its own; the browser-style classes are given ws's.
const hadWebSocket = 'WebSocket' in globalThis;

before(async () => {
  server = net.createServer((socket) => {
    accepted += 1;
    socket.destroy();
  });
  await new Promise((resolve) => server.listen(0, '127.0.0.1', resolve));
  port = server.address().port;
  if (!hadWebSocket) globalThis.WebSocket = ws.WebSocket;
});
after(() => {
  server.close();
  earmark.close();
  if (!hadWebSocket) delete globalThis.WebSocket;
});

const base = () => `http://127.0.0.1:${port}/v1`;
const plain = (options = {}) => new OpenAI({ apiKey: 'k', baseURL: base(), maxRetries: 0, ...options });
const refusal = (module) => `openai/${module} ${OPENAI_SOCKETS[module]} opens a websocket Earmark cannot meter; not connected`;

/** Every module of the installed openai package (its CommonJS files) that opens a websocket,
 * by its path in the package. */
function socketModules(folder = PACKAGE) {
  const found = [];
  for (const entry of readdirSync(folder, { withFileTypes: true })) {
    const at = path.join(folder, entry.name);
    if (entry.isDirectory() && !(folder === PACKAGE && ['src', 'node_modules'].includes(entry.name))) found.push(...socketModules(at));
    else if (entry.isFile() && entry.name.endsWith('.js') && OPENS_SOCKET.test(readFileSync(at, 'utf8'))) {
      found.push(path.relative(PACKAGE, at).slice(0, -'.js'.length).split(path.sep).join('/'));
    }
  }
  return found.sort();
}

/** The websocket class of module, and the ways a caller opens it with client. */
async function opening(module) {
  const Socket = (await import(`openai/${module}`))[OPENAI_SOCKETS[module]];
  if (module.endsWith('responses/ws')) return [(client) => new Socket(client)];
  return [(client) => new Socket({ model: 'gpt-realtime' }, client), (client) => Socket.create(client, { model: 'gpt-realtime' })];
}

/** What opening the socket raised ('opened' when it did not). */
async function raised(open) {
  try {
    const socket = await open();
    socket.on?.('error', () => undefined);
    socket.close?.();
    return 'opened';
  } catch (error) {
    return error;
  }
}

/** Waits until the listening socket has accepted count connections, or waitMs passed. */
async function acceptedReaches(count, waitMs = NO_CONNECTION_MS) {
  for (const start = Date.now(); accepted < count && Date.now() - start < waitMs; ) {
    await new Promise((resolve) => setTimeout(resolve, 20));
  }
  return accepted;
}

test('every module of the openai package that opens a websocket is a surface a metered client refuses', () => {
  assert.deepEqual(socketModules(), Object.keys(OPENAI_SOCKETS).sort());
});

for (const module of Object.keys(OPENAI_SOCKETS)) {
  test(`openai/${module} is refused on a metered client before connecting, and connects on the plain one`, async () => {
    const opens = await opening(module);
    const llm = metered(plain(), earmark, 'sockets');
    const errors = [];
    for (const open of opens) errors.push(await raised(() => open(llm)));
    const before = accepted;
    assert.equal(await acceptedReaches(before + 1), before, 'the metered client connected');
    assert.deepEqual(
      errors.map((error) => [error instanceof SocketNotMeteredError, error instanceof EndpointNotMeteredError, error.message, error.about?.surface]),
      opens.map(() => [true, true, refusal(module), `openai/${module} ${OPENAI_SOCKETS[module]}`]),
    );
    assert.ok(llm instanceof OpenAI);
    // The listening socket is where the plain client's websocket goes.
    const opened = await opens[0](plain());
    opened.on('error', () => undefined);
    assert.equal(await acceptedReaches(before + 1, CONNECT_MS), before + 1, 'the plain client did not connect');
    opened.close();
  });
}

test('the classes are named under a source-mapped stack too (node --enable-source-maps)', async () => {
  // The stack names the package's TypeScript sources then, not its modules.
  const script = [
    "import OpenAI from 'openai';",
    "import { OpenAIRealtimeWS } from 'openai/realtime/ws';",
    "import { ResponsesWS } from 'openai/resources/responses/ws';",
    "import { EarmarkClient, metered } from './dist/esm/index.js';",
    `const earmark = new EarmarkClient({ target: '${NO_SIDECAR}' });`,
    `const llm = metered(new OpenAI({ apiKey: 'k', baseURL: '${base()}' }), earmark, 'mapped');`,
    "for (const open of [() => new OpenAIRealtimeWS({ model: 'm' }, llm), () => new ResponsesWS(llm)]) {",
    '  try { open(); console.log("opened"); } catch (error) { console.log(error.message); }',
    '}',
    'earmark.close();',
  ].join('\n');
  const before = accepted;
  const child = spawn(process.execPath, ['--enable-source-maps', '--input-type=module', '-e', script], { cwd: path.dirname(TEST_DIR) });
  let out = '';
  child.stdout.on('data', (chunk) => (out += chunk));
  const [code] = await once(child, 'exit');
  assert.deepEqual([code, out.trim().split('\n')], [0, [refusal('realtime/ws'), refusal('resources/responses/ws')]]);
  assert.equal(await acceptedReaches(before + 1), before);
});

test('a metered Azure client refuses the realtime classes, which read no key from it', async (t) => {
  const { OpenAIRealtimeWS } = await import('openai/realtime/ws');
  // The SDK's own copy of an Azure client (withOptions, which metered() makes) reads its API
  // version from the environment alone.
  const version = process.env.OPENAI_API_VERSION;
  process.env.OPENAI_API_VERSION = '2025-04-01-preview';
  t.after(() => (version === undefined ? delete process.env.OPENAI_API_VERSION : (process.env.OPENAI_API_VERSION = version)));
  const azure = new AzureOpenAI({ apiKey: 'k', baseURL: `http://127.0.0.1:${port}/openai`, deployment: 'd', maxRetries: 0 });
  const llm = metered(azure, earmark, 'sockets', { deployments: { d: 'gpt-4o' } });
  const before = accepted;
  const errors = [await raised(() => new OpenAIRealtimeWS({ model: 'd' }, llm)), await raised(() => OpenAIRealtimeWS.azure(llm, { deploymentName: 'd' }))];
  assert.deepEqual(errors.map((error) => error.message), [refusal('realtime/ws'), refusal('realtime/ws')]);
  assert.equal(await acceptedReaches(before + 1), before);
});

test('a socket or a request built from the metered client past the classes goes nowhere', async () => {
  const llm = metered(plain(), earmark, 'sockets');
  const before = accepted;
  assert.equal(llm.baseURL, `${NOT_METERED_SCHEME}${base()}`);
  // As the realtime classes build their URL, and as the Responses one does (the client's
  // own buildURL): the wss the URL is set to does not take.
  const realtime = new URL(`${llm.baseURL}/realtime?model=m`);
  realtime.protocol = 'wss';
  const responses = new URL(llm.buildURL('/responses', {}));
  responses.protocol = 'ws:';
  const made = [
    () => new ws.WebSocket(realtime),
    () => new ws.WebSocket(responses.toString()),
    () => new globalThis.WebSocket(realtime.toString()),
  ];
  const errors = made.map((make) => {
    try {
      make().on?.('error', () => undefined);
      return 'opened';
    } catch (error) {
      return error.name;
    }
  });
  const fetched = await fetch(`${llm.baseURL}/images/generations`, { method: 'POST', body: '{}' }).catch((error) => error.cause?.message);
  assert.deepEqual([errors, fetched], [['SyntaxError', 'SyntaxError', 'SyntaxError'], 'unknown scheme']);
  assert.equal(await acceptedReaches(before + 1), before);
});

test("a metered client's copies refuse the sockets too, and send their requests to the provider's URL", async () => {
  const { OpenAIRealtimeWS } = await import('openai/realtime/ws');
  const sent = [];
  const recording = async (input, init) => {
    sent.push(`${init?.method ?? 'GET'} ${String(input)}`);
    return new Response('{"object": "list", "data": []}', { headers: { 'content-type': 'application/json' } });
  };
  const llm = metered(plain({ fetch: recording }), earmark, 'copies');
  const proxy = `http://127.0.0.1:${port}/proxy/v1`;
  const moved = llm.withOptions({});
  moved.baseURL = proxy;
  const copies = [
    llm.withOptions({ timeout: 5_000 }),
    llm.withOptions({ baseURL: proxy }),
    metered(llm, earmark, 'elsewhere'),
    moved,
  ];
  const before = accepted;
  const sockets = [];
  const endpoints = [];
  for (const copy of copies) {
    sockets.push((await raised(() => new OpenAIRealtimeWS({ model: 'm' }, copy))).message);
    endpoints.push(await copy.fineTuning.jobs.resume('ftjob-1').catch((error) => error.about?.endpoint ?? String(error)));
    await copy.models.list();
    await copy.moderations.create({ input: 'hi' });
  }
  assert.deepEqual(sockets, copies.map(() => refusal('realtime/ws')));
  assert.deepEqual(endpoints, [
    'POST /v1/fine_tuning/jobs/ftjob-1/resume',
    'POST /proxy/v1/fine_tuning/jobs/ftjob-1/resume',
    'POST /v1/fine_tuning/jobs/ftjob-1/resume',
    'POST /proxy/v1/fine_tuning/jobs/ftjob-1/resume',
  ]);
  assert.deepEqual(sent, [
    `GET ${base()}/models`, `POST ${base()}/moderations`,
    `GET ${proxy}/models`, `POST ${proxy}/moderations`,
    `GET ${base()}/models`, `POST ${base()}/moderations`,
    `GET ${proxy}/models`, `POST ${proxy}/moderations`,
  ]);
  assert.deepEqual(copies.map((copy) => copy.baseURL), [base(), proxy, base(), proxy].map((url) => NOT_METERED_SCHEME + url));
  assert.equal(await acceptedReaches(before + 1), before);
});
