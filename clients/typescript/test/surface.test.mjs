// Every route of the installed openai and @anthropic-ai/sdk packages is classified: each
// method of each resource of their clients (found by walking the client's resources, beta's
// and admin's included, and theirs) is called with stand-in arguments through a fetch that
// records the request and sends nothing, and every POST must be in the provider's route
// table (metered, free or refused). The same methods through a metered client: each POST the
// table refuses is refused unsent, each free one reaches the wire as it was. No sidecar and
// no provider: these read the packages and the tables alone (the Python SDK's
// tests/client/test_routes.py, for the Node packages).
import assert from 'node:assert/strict';
import { after, test } from 'node:test';
import Anthropic from '@anthropic-ai/sdk';
import OpenAI from 'openai';
import { EarmarkClient, EndpointNotMeteredError, metered } from '../dist/esm/index.js';
import { ANTHROPIC_ROUTES } from '../dist/esm/routes-anthropic.js';
import { OPENAI_ROUTES } from '../dist/esm/routes-openai.js';
import { FREE, REFUSED, within } from '../dist/esm/routes.js';

// The base URLs the recording clients are given; nothing is sent to either.
const OPENAI_BASE = 'http://127.0.0.1:9/v1';
const ANTHROPIC_BASE = 'http://127.0.0.1:9';
// How long one method is given to send its first request: a helper that starts its request
// later (a stream, a runner) is waited for, a poller stopped there.
const STEP_MS = 5_000;
// A sidecar address nothing listens on: the metered pass sends no billable request, so the
// metered client never asks it anything.
const NO_SIDECAR = '127.0.0.1:9';

// The methods that send nothing themselves: they read locally (a webhook's signature), or
// give back an object whose requests are its resource's own.
const LOCAL = {
  openai: new Set(['webhooks.unwrap', 'webhooks.verifySignature']),
  // A thread sends through beta.messages.create, the environment worker through work's own
  // methods: each gives back an object and sends nothing until it is used.
  anthropic: new Set(['beta.webhooks.unwrap', 'beta.webhooks.parseUnverified', 'beta.messages.thread', 'beta.environments.work.worker']),
};
// The methods whose POST is metered: every other POST passes, billing nothing, or is refused.
const METERED = {
  openai: new Set([
    'chat.completions.create', 'chat.completions.parse', 'chat.completions.stream',
    'chat.completions.runTools', 'responses.create', 'responses.parse', 'responses.stream',
    'beta.responses.create', 'embeddings.create',
  ]),
  anthropic: new Set([
    'messages.create', 'messages.parse', 'messages.stream', 'beta.messages.create',
    'beta.messages.parse', 'beta.messages.stream', 'beta.messages.toolRunner',
  ]),
};
// Arguments the stand-ins do not satisfy (helpers that read the body before sending it, or
// take their ids and options apart), by the method's dotted name; given the signal that
// stops a helper that would go on polling once its step is over.
const CHAT = { model: 'm', messages: [], tools: [] };
const MESSAGES = { model: 'm', max_tokens: 1, messages: [] };
const RUN = ['{run_id}', { thread_id: '{thread_id}' }];
const OVERRIDES = {
  'chat.completions.runTools': () => [CHAT],
  'chat.completions.stream': () => [CHAT],
  'beta.threads.runs.poll': () => RUN,
  'beta.threads.runs.submitToolOutputsAndPoll': () => RUN,
  'beta.threads.runs.submitToolOutputsStream': () => RUN,
  'vectorStores.fileBatches.uploadAndPoll': () => ['{vector_store_id}', { files: [new File(['a'], 'a.txt')] }],
  'messages.stream': () => [MESSAGES],
  'beta.messages.stream': () => [MESSAGES],
  'beta.environments.work.poller': (signal) => [{ environmentId: '{environment_id}', environmentKey: 'k', signal }],
  'beta.sessions.events.toolRunner': (signal) => ['{session_id}', { tools: [], signal }],
};

/** The recording fetch: each request's method and path (percent-decoded, so that an id
 * given as "{name}" reads as it), then a failure, so that nothing leaves the process. */
function recorder() {
  const recording = {
    sent: [],
    waiting: null,
    fetch: async (input, init) => {
      const url = new URL(input instanceof Request ? input.url : String(input));
      // The SDK asks a data: URL whether this fetch's answers read as form data: that is
      // no request.
      if (url.protocol === 'data:') return globalThis.fetch(url);
      const method = (init?.method ?? (input instanceof Request ? input.method : 'GET')).toUpperCase();
      recording.sent.push({ method, path: decodeURIComponent(url.pathname) });
      recording.waiting?.();
      throw new Error('recorded, not sent');
    },
  };
  return recording;
}

/** Every method of every resource under root (a client or a resource), by its dotted name:
 * the resources are root's own properties that are resources of client, and theirs. */
function* methods(root, client, prefix = '') {
  for (const key of Object.keys(root).sort()) {
    const resource = root[key];
    if (key.startsWith('_') || resource === null || typeof resource !== 'object' || resource._client !== client) continue;
    const seen = new Set();
    for (let proto = Object.getPrototypeOf(resource); proto !== null && proto !== Object.prototype; proto = Object.getPrototypeOf(proto)) {
      if (proto.constructor?.name === 'APIResource') break;
      for (const name of Object.getOwnPropertyNames(proto).sort()) {
        const value = Object.getOwnPropertyDescriptor(proto, name).value;
        if (name === 'constructor' || name.startsWith('_') || typeof value !== 'function' || seen.has(name)) continue;
        seen.add(name);
        yield [`${prefix}${key}.${name}`, resource, value];
      }
    }
    yield* methods(resource, client, `${prefix}${key}.`);
  }
}

/** The text between the bracket at open and the one closing it. */
function bracketed(source, open) {
  let depth = 0;
  for (let i = open; i < source.length; i += 1) {
    if ('([{'.includes(source[i])) depth += 1;
    else if (')]}'.includes(source[i]) && (depth -= 1) === 0) return source.slice(open + 1, i);
  }
  return '';
}

/** text split at its top-level commas. */
function topLevel(text) {
  const parts = [];
  let depth = 0;
  let start = 0;
  for (let i = 0; i < text.length; i += 1) {
    if ('([{'.includes(text[i])) depth += 1;
    else if (')]}'.includes(text[i])) depth -= 1;
    else if (text[i] === ',' && depth === 0) parts.push(text.slice(start, i)), (start = i + 1);
  }
  if (text.trim() !== '') parts.push(text.slice(start));
  return parts.map((part) => part.trim()).filter((part) => part !== '');
}

/**
 * Stand-in arguments for method, read from its source (the SDKs ship their JavaScript): an
 * id parameter ("fileID") is a string naming it ("{fileID}"), so that the path reads as
 * its template; a parameter the method destructures ("const { container_id, ...body } =
 * params") is an object with each named field a string naming it; a parameter with a
 * default, and the trailing request options, are left out.
 */
function standIns(method) {
  const source = method.toString();
  const given = topLevel(bracketed(source, source.indexOf('(')));
  const args = [];
  for (const parameter of given) {
    if (parameter.includes('=') || parameter === 'options') break;
    const destructured = new RegExp(`const\\s*\\{([^}]*)\\}\\s*=\\s*${parameter}\\b`).exec(source);
    // An id read off the parameter (params.thread_id) is a path's too.
    const ids = [...source.matchAll(new RegExp(`\\b${parameter}\\.(\\w+_id)\\b`, 'g'))].map((m) => m[1]);
    if (destructured !== null || ids.length > 0) {
      const named = destructured === null ? [] : topLevel(destructured[1]).filter((f) => !f.startsWith('...'));
      const fields = [...named.map((f) => f.split(/[:=]/)[0].trim()), ...ids];
      args.push(Object.fromEntries(fields.map((f) => [f, `{${f}}`])));
    } else if (/^(body|params|query|opts)$/.test(parameter)) {
      args.push({});
    } else {
      args.push(`{${parameter}}`);
    }
  }
  return args;
}

/** What method sends first (its answer awaited, a stream or runner waited for, or iterated
 * for a runner that starts when read), and the error it ended with, if any. */
async function firstSent(name, resource, method, recording) {
  recording.sent = [];
  const sent = new Promise((resolve) => (recording.waiting = resolve));
  const stop = new AbortController();
  let error = null;
  let result;
  const driven = (async () => {
    result = method.apply(resource, argumentsOf(name, method, stop.signal));
    if (result !== null && typeof result === 'object' && typeof result.on === 'function') result.on('error', () => undefined);
    if (typeof result?.then === 'function') await result;
    else if (typeof result?.done === 'function') await result.done();
    else if (typeof result?.[Symbol.asyncIterator] === 'function') await result[Symbol.asyncIterator]().next();
  })().catch((caught) => void (error = caught));
  let timer;
  const late = new Promise((resolve) => (timer = setTimeout(resolve, STEP_MS)));
  await Promise.race([sent, driven, late]);
  // A metered client's refusal, made before any request, ends the helper soon after.
  await Promise.race([driven, new Promise((resolve) => setTimeout(resolve, recording.sent.length > 0 ? 0 : 50))]);
  clearTimeout(timer);
  // A stream or a poller that would go on retrying its failed request is stopped.
  stop.abort();
  if (typeof result?.abort === 'function') result.abort();
  recording.waiting = null;
  return { sent: recording.sent[0] ?? null, error };
}

function argumentsOf(name, method, signal) {
  return OVERRIDES[name]?.(signal) ?? standIns(method);
}

/** What every method of client sends first ({method, path}), the methods that send
 * nothing, and those that could not be called. */
async function surface(client, recording, local) {
  const found = { called: new Set(), sent: new Map(), local: new Set(), failed: new Map() };
  for (const [name, resource, method] of methods(client, client)) {
    found.called.add(name);
    const { sent, error } = await firstSent(name, resource, method, recording);
    if (sent !== null) found.sent.set(name, sent);
    else if (error === null || local.has(name)) found.local.add(name);
    else found.failed.set(name, `${error?.constructor?.name}: ${error?.message}`);
  }
  return found;
}

/** Each POST the table does not list, and each request of a method the tests know not
 * (a PUT or PATCH would pass unmetered, as any request but a POST does). */
function unclassified(found, routes, prefix) {
  const unknown = [...found.sent]
    .filter(([, sent]) => sent.method === 'POST' && (!within(sent.path, prefix) || routes.find(sent.path.slice(prefix.length)) === null))
    .map(([name, sent]) => `${name} POST ${sent.path}`);
  const strange = [...found.sent]
    .filter(([, sent]) => !['GET', 'DELETE', 'POST'].includes(sent.method))
    .map(([name, sent]) => `${name} ${sent.method} ${sent.path}`);
  return [...unknown, ...strange];
}

/** The methods by what becomes of what they send: a POST metered, free or refused, any
 * other method passed. */
function kinds(found, routes, prefix) {
  const byKind = {};
  for (const [name, sent] of found.sent) {
    let what = sent.method;
    if (sent.method === 'POST') {
      const route = routes.find(sent.path.slice(prefix.length));
      what = route === FREE || route === REFUSED ? route : 'metered';
    }
    (byKind[what] ??= new Set()).add(name);
  }
  return byKind;
}

/** What the metered client does with each method whose POST the table lists as free or
 * refused: its first request as it reached the wire, or the error it was refused with. */
async function meteredPass(client, names, recording) {
  const outcome = new Map();
  const byName = new Map([...methods(client, client)].map(([name, resource, method]) => [name, [resource, method]]));
  for (const name of names) {
    const [resource, method] = byName.get(name);
    const { sent, error } = await firstSent(name, resource, method, recording);
    const refused = error instanceof EndpointNotMeteredError ? `refused: ${decodeURIComponent(error.about.endpoint)}` : String(error);
    outcome.set(name, sent ?? refused);
  }
  return outcome;
}

const earmark = new EarmarkClient({ target: NO_SIDECAR, adminTarget: NO_SIDECAR });
after(() => earmark.close());
// A helper that fails after its request may leave a promise nobody awaits rejected.
const ignored = [];
const ignore = (reason) => ignored.push(reason);
process.on('unhandledRejection', ignore);
after(() => process.off('unhandledRejection', ignore));

async function classified(sdk, makeClient, routes, prefix) {
  // A helper that uploads several files logs each one's failure itself.
  const log = console.error;
  console.error = () => undefined;
  try {
    return await classifiedQuietly(sdk, makeClient, routes, prefix);
  } finally {
    console.error = log;
  }
}

async function classifiedQuietly(sdk, makeClient, routes, prefix) {
  const recording = recorder();
  const client = makeClient(recording.fetch);
  const found = await surface(client, recording, LOCAL[sdk]);
  assert.deepEqual(Object.fromEntries(found.failed), {});
  assert.deepEqual(unclassified(found, routes, prefix), []);
  assert.deepEqual([...found.local].sort(), [...LOCAL[sdk]].filter((n) => found.called.has(n)).sort());
  const byKind = kinds(found, routes, prefix);
  assert.deepEqual([...byKind.metered].sort(), [...METERED[sdk]].sort());
  // Through a metered client: refused unsent, or sent as it was.
  const meteredRecording = recorder();
  const llm = metered(makeClient(meteredRecording.fetch), earmark, 'surface');
  const passed = [...(byKind[FREE] ?? [])];
  const refused = [...(byKind[REFUSED] ?? [])];
  const outcome = await meteredPass(llm, [...passed, ...refused], meteredRecording);
  const expected = new Map([
    ...passed.map((name) => [name, found.sent.get(name)]),
    ...refused.map((name) => [name, `refused: POST ${found.sent.get(name).path}`]),
  ]);
  assert.deepEqual(outcome, expected);
  const counts = Object.fromEntries(Object.entries(byKind).map(([kind, names]) => [kind, names.size]));
  const posts = new Set([...found.sent.values()].filter((s) => s.method === 'POST').map((s) => s.path));
  console.log(`${sdk}: ${found.called.size} methods, ${posts.size} POST paths, ${JSON.stringify(counts)}, local ${found.local.size}`);
  return found;
}

test('every POST of the openai package is classified, and metered as its table says', async () => {
  await classified(
    'openai',
    (fetch) => new OpenAI({ apiKey: 'k', adminAPIKey: 'a', webhookSecret: 'w', baseURL: OPENAI_BASE, maxRetries: 0, logLevel: 'off', fetch }),
    OPENAI_ROUTES,
    '/v1',
  );
});

test('every POST of the @anthropic-ai/sdk package is classified, and metered as its table says', async () => {
  await classified(
    'anthropic',
    (fetch) => new Anthropic({ apiKey: 'k', baseURL: ANTHROPIC_BASE, maxRetries: 0, logLevel: 'off', fetch }),
    ANTHROPIC_ROUTES,
    '',
  );
});
