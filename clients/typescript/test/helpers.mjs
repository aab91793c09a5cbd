// What the tests share: a client on the live sidecar the pytest harness started
// (EARMARK_TARGET, EARMARK_ADMIN_TARGET), budget ids of their own, the fake providers'
// addresses (tests/fake_openai.py and tests/fake_anthropic.py, started by
// tests/clients/test_typescript.py), the test's prices, and a fetch that records what
// reached the wire.
import { randomUUID } from 'node:crypto';
import { credentials } from '@grpc/grpc-js';
import { EarmarkClient, wire } from '../dist/esm/index.js';

export function client(options = {}) {
  return new EarmarkClient(options);
}

/** A budget id no other test uses. */
export function budgetId(name) {
  return `ts/${name}/${randomUUID().slice(0, 8)}`;
}

export const FAKE_OPENAI_URL = process.env.FAKE_OPENAI_URL;
/** A fake OpenAI that answers 290 tokens (not 300), three a chunk, of uneven lengths. */
export const FAKE_OPENAI_CHUNKED_URL = process.env.FAKE_OPENAI_CHUNKED_URL;
/** The chunked fake's token texts (its token i is CHUNKED_TEXTS[i % 3]). */
export const CHUNKED_TEXTS = ['alpha ', 'be ', 'gamma-delta '];
export const FAKE_ANTHROPIC_URL = process.env.FAKE_ANTHROPIC_URL;
/** A fake Anthropic that reads 40 prompt tokens from its cache and writes 100. */
export const FAKE_ANTHROPIC_CACHE_URL = process.env.FAKE_ANTHROPIC_CACHE_URL;
/** The text of requests that must never reach a fake: the harness checks that none did. */
export const NEVER_SENT = 'never-sent';

/** The test's rates, in micro-dollars a token (so that every cost is exact): input 2,
 * a cache read 1, a cache write 3 (an hour's 4), output 8; a web search 10,000. */
export const RATES = { input: 2, cached: 1, write: 3, writeLong: 4, output: 8, search: 10_000 };
/** The output ceiling of the test's models: above the 300 tokens the fakes answer. */
export const CEILING = 4096;

/** Puts the test's price for provider's model (at tier, with rates multiplied by scale). */
export async function putPrice(earmark, provider, model, { tier = '', scale = 1 } = {}) {
  const perMtok = (micros) => micros * scale * 1_000_000;
  await earmark.putPrice({
    provider,
    model,
    effectiveFrom: new Date('2026-01-01T00:00:00Z'),
    inputUsdMicrosPerMtok: perMtok(RATES.input),
    cachedInputUsdMicrosPerMtok: perMtok(RATES.cached),
    cacheWriteUsdMicrosPerMtok: perMtok(RATES.write),
    cacheWriteLongUsdMicrosPerMtok: perMtok(RATES.writeLong),
    outputUsdMicrosPerMtok: perMtok(RATES.output),
    maxOutputTokens: CEILING,
    serviceTier: tier,
    toolUsdMicros: { web_search: RATES.search, file_search: RATES.search, code_interpreter: RATES.search },
    source: 'test',
  });
}

/** A budget in usd_micros of limit, under a new id. */
export async function usdBudget(earmark, name, limit) {
  const id = budgetId(name);
  await earmark.putBudget(id, limit, 'usd_micros');
  return id;
}

/** The Earmark estimate of a prompt of chars characters in messages messages: a token
 * per 3 characters rounded up, 4 a message and 3 for the reply. */
export function estimate(chars, messages = 1) {
  return Math.ceil(chars / 3) + 4 * messages + 3;
}

/**
 * A fetch for a provider client that records each request as it reaches the wire (its
 * method, path and JSON body) and, when watch(budgetId) was called, the budget's state at
 * that moment: what was held and charged before the request left.
 */
export function wireSpy(earmark) {
  const spy = {
    sent: [],
    budget: null,
    watch(id) {
      spy.budget = id;
      spy.sent = [];
    },
    fetch: async (input, init) => {
      const url = new URL(String(input));
      const body = typeof init?.body === 'string' ? JSON.parse(init.body) : null;
      const record = { method: init?.method ?? 'GET', path: url.pathname, body, state: null };
      if (spy.budget !== null) record.state = await earmark.getBudget(spy.budget);
      spy.sent.push(record);
      return globalThis.fetch(input, init);
    },
  };
  return spy;
}

/** [used, held, openReservations] of a budget. */
export async function ledger(earmark, id) {
  const state = await earmark.getBudget(id);
  return [state.used, state.held, state.openReservations];
}

/** The holds of a budget as the sidecar's Admin.ListHolds answers them (its first page):
 * state, labels, expiresAt, settledUsed... (the generated wire.Hold). */
export async function holdsOf(id) {
  const admin = new wire.AdminClient(process.env.EARMARK_ADMIN_TARGET, credentials.createInsecure());
  try {
    const page = await new Promise((resolve, reject) =>
      admin.listHolds({ budgetId: id, state: 0, pageSize: 0, pageToken: '' }, (error, answer) => (error ? reject(error) : resolve(answer))),
    );
    return page.holds;
  } finally {
    admin.close();
  }
}

/** Waits until check() answers true, trying every 50 ms for at most withinMs; fails naming
 * what it waited for. */
export async function eventually(check, what, withinMs = 10_000) {
  for (const start = Date.now(); Date.now() - start < withinMs; await new Promise((r) => setTimeout(r, 50))) {
    if (await check()) return;
  }
  throw new Error(`${what}: not within ${withinMs} ms`);
}
