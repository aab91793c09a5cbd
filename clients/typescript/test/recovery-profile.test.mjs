// The Cycles SDK Recovery Conformance Profile (runcycles/cycles-protocol, client-recovery/),
// each scenario of its core and durable levels and its boundary held by tests whose titles
// start with the scenario id, against the live sidecar the pytest harness started and, where
// the scenario injects a fault, a proxy between client and sidecar (recovery-proxy.mjs).
// docs/recovery-conformance.md maps HTTP's terms onto Earmark's and says which scenarios are
// met; tests/client/recovery_profile_scenarios.json binds each id to these titles, and
// tests/client/test_recovery_profile.py runs them one scenario at a time. The tests of
// flush(timeoutMs) are here too.
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { createHash } from 'node:crypto';
import { mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { after, test } from 'node:test';
import { status } from '@grpc/grpc-js';
import OpenAI from 'openai';
import { ClientError, Journal, QUARANTINE, hold, journalRecordName, metered, wire } from '../dist/esm/index.js';
import { encodeJournalRecord, legacyJournalRecordName } from '../dist/esm/journal.js';
import { FAKE_OPENAI_URL, budgetId, client, ledger, putPrice } from './helpers.mjs';
import { answerLost, answeredWith, gate, held, refused, startProxy } from './recovery-proxy.mjs';

const earmark = client();
const folders = [];
const proxies = [];
const WORKER = path.join(import.meta.dirname, 'recovery-worker.mjs');
after(() => {
  earmark.close();
  for (const proxy of proxies) proxy.close();
  for (const folder of folders) rmSync(folder, { recursive: true, force: true });
});

/** A proxy to the live sidecar, closed when the file's tests end. */
async function proxied() {
  const proxy = await startProxy(earmark.target);
  proxies.push(proxy);
  return proxy;
}

/** A journal directory of the test's own. */
function journalDir() {
  const folder = mkdtempSync(path.join(tmpdir(), 'earmark-recovery-'));
  folders.push(folder);
  return path.join(folder, 'journal');
}

/** The names of the journal's records (not its quarantine). */
function records(dir) {
  try {
    return readdirSync(dir)
      .filter((name) => name.endsWith('.json'))
      .sort();
  } catch {
    return [];
  }
}

/** Polls check every 50 ms until it holds, failing after withinMs naming what. */
async function until(check, what, withinMs = 10_000) {
  const started = Date.now();
  while (Date.now() - started < withinMs) {
    if (await check()) return;
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
  throw new Error(`${what}: not within ${withinMs} ms`);
}

/** The warnings process.emitWarning raised while fn ran, and what fn answered. */
async function warningsOf(fn) {
  const seen = [];
  const listen = (warning) => seen.push(warning.message);
  process.on('warning', listen);
  try {
    const result = await fn();
    await new Promise((resolve) => setImmediate(resolve));
    return { result, warnings: seen };
  } finally {
    process.off('warning', listen);
  }
}

/** A fresh budget of 100,000 tokens and a hold of 40,000 on it. */
async function holdOn(name, options = {}) {
  const id = budgetId(name);
  await earmark.putBudget(id, 100_000, 'tokens');
  const reservation = await earmark.reserve(id, 40_000, options);
  assert.equal(reservation.admitted, true);
  return { id, rid: reservation.reservationId };
}

/** A Settle request of used tokens, succeeded, as the SDK sends it. */
function settleOf(reservationId, used) {
  return { reservationId, used: BigInt(used), outcome: wire.Outcome.OUTCOME_SUCCEEDED, usage: undefined };
}

/** Waits until the sweeper took the hold of budget id (nothing held any more). */
async function swept(id) {
  await until(async () => (await earmark.getBudget(id)).held === 0, 'the hold expired by the sweeper');
}

/** A child process of this file's worker; resolves to { code, signal, stdout } at its end. */
function worker(...args) {
  const child = spawn(process.execPath, [WORKER, ...args], { stdio: ['ignore', 'pipe', 'inherit'] });
  let stdout = '';
  child.stdout.on('data', (chunk) => {
    stdout += chunk;
  });
  const ended = new Promise((resolve) => child.on('exit', (code, signal) => resolve({ code, signal, stdout })));
  return { child, ended };
}

// Core.

test('CR-CORE-001 a lost settle answer is sent again as it was', async () => {
  const id = budgetId('core-1');
  await earmark.putBudget(id, 100_000, 'tokens');
  const proxy = await proxied();
  proxy.faults.Settle.push(answerLost());
  const via = client({ target: proxy.target });
  try {
    let rid;
    await hold(via, id, 40_000, async (h) => {
      rid = h.reservationId;
      h.used = 31_200;
    });
    const [first, again] = proxy.seen.Settle.map(({ request }) => request);
    assert.deepEqual(again, first);
    assert.deepEqual([proxy.settles()[0].reservationId, proxy.settles()[0].used], [rid, 31_200n]);
    assert.deepEqual(await ledger(earmark, id), [31_200, 0, 0]);
  } finally {
    via.close();
  }
});

test('CR-CORE-002 a settle after expiry records the actual as a late settle', async () => {
  const id = budgetId('core-2');
  await earmark.putBudget(id, 100_000, 'tokens');
  const proxy = await proxied();
  // Every renewal fails, so the 1 s lease passes while the block runs.
  proxy.faults.Renew.push(...Array.from({ length: 50 }, () => refused(status.UNAVAILABLE)));
  const via = client({ target: proxy.target, retry: { attemptsMax: 1 } });
  try {
    let h;
    await warningsOf(() =>
      hold(
        via,
        id,
        40_000,
        async (it) => {
          h = it;
          await swept(id);
          it.used = 7_000;
        },
        { leaseSeconds: 1 },
      ),
    );
    const [sent] = proxy.settles();
    assert.equal(proxy.settles().length, 1);
    assert.deepEqual([sent.reservationId, sent.used, sent.outcome], [h.reservationId, 7_000n, wire.Outcome.OUTCOME_SUCCEEDED]);
    assert.deepEqual([h.settled.state, h.settled.charged], ['EXPIRED', 7_000]);
    assert.deepEqual(await ledger(earmark, id), [7_000, 0, 0]);
  } finally {
    via.close();
  }
});

/** hold() with a 2 s lease whose first renewal the proxy refuses UNAVAILABLE: the
 * reservation id, the renewal warnings, the Renew requests, the hold and the budget id. */
async function renewalFailing(name) {
  const id = budgetId(name);
  await earmark.putBudget(id, 100_000, 'tokens');
  const proxy = await proxied();
  proxy.faults.Renew.push(refused(status.UNAVAILABLE));
  const via = client({ target: proxy.target, retry: { attemptsMax: 1 } });
  try {
    let h;
    let charged;
    const { warnings } = await warningsOf(() =>
      hold(
        via,
        id,
        40_000,
        async (it) => {
          h = it;
          await until(() => proxy.seen.Renew.length >= 2, 'a failed renewal and one more');
          charged = await it.charge(10_000);
          it.used = 25_000;
        },
        { leaseSeconds: 2 },
      ),
    );
    assert.equal(charged.charged, 10_000);
    return { rid: h.reservationId, warnings: warnings.filter((w) => w.startsWith('earmark renew of reservation')), proxy, h, id };
  } finally {
    via.close();
  }
}

test('CR-CORE-003 a failed renewal is a warning and the hold still settles', async () => {
  const { rid, warnings, proxy, h, id } = await renewalFailing('core-3');
  assert.equal(warnings.length, 1);
  const [first, again] = proxy.seen.Renew.map(({ request }) => request);
  assert.deepEqual(again, first);
  assert.equal(wire.RenewRequest.decode(first).reservationId, rid);
  assert.deepEqual([h.settled.state, h.settled.charged], ['SETTLED', 25_000]);
  assert.deepEqual(await ledger(earmark, id), [25_000, 0, 0]);
});

test(
  'CR-CORE-003 a failed renewal warning names the reservation and the retry',
  async () => {
    const { rid, warnings } = await renewalFailing('core-3-named');
    assert.equal(warnings.length, 1);
    assert.ok(warnings.every((w) => w.includes(rid) && /retr/.test(w)), warnings.join('\n'));
  },
);

test('CR-CORE-004 a settle answer that is no settled answer keeps the record', async () => {
  const notSettled = wire.SettleResponse.encode({
    charged: 31_200n,
    released: 0n,
    overshoot: 0n,
    state: wire.ReservationState.RESERVATION_STATE_HELD,
    priceVersion: 0n,
  }).finish();
  for (const body of [Buffer.from([0xff, 0xff, 0xff]), Buffer.from(notSettled)]) {
    const { id, rid } = await holdOn('core-4');
    const dir = journalDir();
    const proxy = await proxied();
    proxy.faults.Settle.push(answeredWith(body));
    const via = client({ target: proxy.target, journalDir: dir });
    try {
      const error = await via.settle(rid, 31_200).catch((e) => e);
      assert.ok(error instanceof ClientError, String(error));
      assert.deepEqual([error.code, records(dir)], [status.INTERNAL, [journalRecordName(rid)]]);
      assert.equal(await via.recover(), 1);
      const [first, again] = proxy.seen.Settle.map(({ request }) => request);
      assert.deepEqual([again, records(dir)], [first, []]);
      assert.deepEqual(await ledger(earmark, id), [31_200, 0, 0]);
    } finally {
      via.close();
    }
  }
});

// Durable.

test('CR-DURABLE-001 a settle in flight when its worker dies is replayed once', async () => {
  const { id, rid } = await holdOn('durable-1');
  const dir = journalDir();
  const proxy = await proxied();
  const applied = gate();
  const onDisk = [];
  proxy.faults.Settle.push(async (request, forward) => {
    onDisk.push(records(dir));
    await forward();
    applied.open();
    return new Promise(() => {}); // the answer never comes: the worker is killed first
  });
  const { child, ended } = worker('settle', proxy.target, dir, rid, '31200');
  await applied.opened;
  child.kill('SIGKILL');
  assert.equal((await ended).signal, 'SIGKILL');
  const [{ request: sent }] = proxy.seen.Settle;
  const [left] = await new Journal(dir).pending();
  assert.deepEqual([onDisk, Buffer.from(wire.SettleRequest.encode(left.request).finish())], [[[journalRecordName(rid)]], sent]);
  const fresh = client({ journalDir: dir });
  try {
    assert.equal(await fresh.recover(), 1);
    assert.equal(await fresh.recover(), 0);
  } finally {
    fresh.close();
  }
  assert.deepEqual(records(dir), []);
  assert.deepEqual(await ledger(earmark, id), [31_200, 0, 0]);
});

test('CR-DURABLE-002 a replayed settle of an expired hold lands late once', async () => {
  const { id, rid } = await holdOn('durable-2', { leaseSeconds: 1 });
  const dir = journalDir();
  await new Journal(dir).write(settleOf(rid, 7_000));
  const before = readFileSync(path.join(dir, journalRecordName(rid)));
  await swept(id);
  const proxy = await proxied();
  proxy.faults.Settle.push(answerLost());
  const first = client({ target: proxy.target, journalDir: dir, retry: { attemptsMax: 1 } });
  try {
    const { result } = await warningsOf(() => first.recover());
    assert.equal(result, 0);
  } finally {
    first.close();
  }
  assert.deepEqual(readFileSync(path.join(dir, journalRecordName(rid))), before);
  assert.deepEqual(await ledger(earmark, id), [7_000, 0, 0]);
  const second = client({ journalDir: dir });
  try {
    assert.equal(await second.recover(), 1);
  } finally {
    second.close();
  }
  assert.deepEqual(records(dir), []);
  assert.deepEqual(await ledger(earmark, id), [7_000, 0, 0]);
});

test('CR-DURABLE-003 a settle refused RESOURCE_EXHAUSTED keeps its record', async () => {
  const { id, rid } = await holdOn('durable-3');
  const dir = journalDir();
  const proxy = await proxied();
  proxy.faults.Settle.push(refused(status.RESOURCE_EXHAUSTED));
  const first = client({ target: proxy.target, journalDir: dir });
  try {
    const error = await first.settle(rid, 31_200).catch((e) => e);
    assert.deepEqual([error.code, proxy.seen.Settle.length, records(dir)], [status.RESOURCE_EXHAUSTED, 1, [journalRecordName(rid)]]);
  } finally {
    first.close();
  }
  const restarted = client({ target: proxy.target, journalDir: dir });
  try {
    assert.equal(await restarted.recover(), 1);
  } finally {
    restarted.close();
  }
  const [first_, again] = proxy.seen.Settle.map(({ request }) => request);
  assert.deepEqual([again, records(dir)], [first_, []]);
  assert.deepEqual(await ledger(earmark, id), [31_200, 0, 0]);
});

test('CR-DURABLE-004 a record outlives a worker token change and holds no token', async () => {
  const { id, rid } = await holdOn('durable-4');
  const dir = journalDir();
  const proxy = await proxied();
  proxy.faults.Settle.push(refused(status.UNAVAILABLE));
  const old = client({ target: proxy.target, token: 'old-worker-token-0123456789', journalDir: dir, retry: { attemptsMax: 1 } });
  try {
    await assert.rejects(old.settle(rid, 31_200), { name: 'UnavailableError' });
  } finally {
    old.close();
  }
  const stored = Buffer.concat(records(dir).map((name) => readFileSync(path.join(dir, name))));
  const rotated = client({ target: proxy.target, token: 'new-worker-token-9876543210', journalDir: dir });
  try {
    assert.equal(await rotated.recover(), 1);
  } finally {
    rotated.close();
  }
  const [sentOld, sentNew] = proxy.seen.Settle;
  assert.equal(stored.includes('old-worker-token'), false);
  assert.deepEqual(
    [sentOld.metadata.get('authorization'), sentNew.metadata.get('authorization')],
    [['Bearer old-worker-token-0123456789'], ['Bearer new-worker-token-9876543210']],
  );
  assert.deepEqual([sentNew.request, records(dir)], [sentOld.request, []]);
  assert.deepEqual(await ledger(earmark, id), [31_200, 0, 0]);
});

test('CR-DURABLE-005 unreadable and unknown records are quarantined and reported', async () => {
  const { id, rid } = await holdOn('durable-5');
  const dir = journalDir();
  await new Journal(dir).write(settleOf(rid, 31_200));
  const corrupt = journalRecordName('corrupt');
  writeFileSync(path.join(dir, corrupt), '{"version": 2, "reserv');
  const future = journalRecordName('future');
  const newer = JSON.parse(encodeJournalRecord(settleOf('future', 5)).toString());
  writeFileSync(path.join(dir, future), JSON.stringify({ ...newer, version: 3 }));
  writeFileSync(path.join(dir, 'bad.settle'), Buffer.from('\xff\xff not protobuf', 'latin1'));
  const replaying = client({ journalDir: dir });
  try {
    const { result, warnings } = await warningsOf(() => replaying.recover());
    const journaled = warnings.filter((w) => w.startsWith('earmark journal:'));
    assert.equal(result, 1);
    assert.deepEqual(readdirSync(path.join(dir, QUARANTINE)).sort(), [corrupt, future, 'bad.settle'].sort());
    assert.deepEqual(records(dir), []);
    assert.equal(journaled.length, 3);
    assert.ok(journaled.some((w) => w.includes(corrupt) && w.includes('SyntaxError')), journaled.join('\n'));
    assert.ok(journaled.some((w) => w.includes(future) && w.includes('unsupported record version 3')), journaled.join('\n'));
  } finally {
    replaying.close();
  }
  assert.deepEqual(await ledger(earmark, id), [31_200, 0, 0]);
});

test('CR-DURABLE-006 two workers replaying one record settle it once', async () => {
  const { id, rid } = await holdOn('durable-6');
  const dir = journalDir();
  await new Journal(dir).write(settleOf(rid, 31_200));
  const proxy = await proxied();
  const both = gate();
  const together = async (request, forward) => {
    if (proxy.seen.Settle.length >= 2) both.open();
    await both.opened;
    return forward();
  };
  proxy.faults.Settle.push(together, together);
  const ends = await Promise.all([worker('recover', proxy.target, dir).ended, worker('recover', proxy.target, dir).ended]);
  assert.deepEqual(
    ends.map(({ code, stdout }) => [code, JSON.parse(stdout)]),
    [
      [0, { recovered: 1 }],
      [0, { recovered: 1 }],
    ],
  );
  const [first, second] = proxy.seen.Settle.map(({ request }) => request);
  assert.deepEqual([second, records(dir)], [first, []]);
  assert.deepEqual(await ledger(earmark, id), [31_200, 0, 0]);
});

// Reservation ids that a name made by escaping, case folding, Unicode normalization or
// truncation would confuse: each must have a file of its own (the Python test's list).
const CONFUSABLE_IDS = ['r/1', 'r_1', 'R/1', 'r%2F1', 'caf\u00e9', 'cafe\u0301', '\u{1f600}', `${'x'.repeat(300)}a`, `${'x'.repeat(300)}b`];

test('CR-DURABLE-007 a record is named by the sha256 of its exact utf8 id', async () => {
  const journal = new Journal(journalDir());
  const names = [];
  for (const [n, rid] of CONFUSABLE_IDS.entries()) names.push(path.basename(await journal.write(settleOf(rid, n))));
  const expected = CONFUSABLE_IDS.map((rid) => `v2-${createHash('sha256').update(Buffer.from(rid, 'utf8')).digest('hex')}.json`);
  assert.deepEqual([names, new Set(names).size], [expected, CONFUSABLE_IDS.length]);
  const read = Object.fromEntries((await journal.pending()).map(({ request }) => [request.reservationId, Number(request.used)]));
  assert.deepEqual(read, Object.fromEntries(CONFUSABLE_IDS.map((rid, n) => [rid, n])));
});

test('CR-DURABLE-007 a first-format record moves to its name and a shared name stays', async () => {
  const dir = journalDir();
  const journal = new Journal(dir);
  await journal.pending();
  const legacy = (rid, used) => Buffer.from(wire.SettleRequest.encode(settleOf(rid, used)).finish());
  const legacies = () => readdirSync(dir).filter((name) => name.endsWith('.settle')).sort();
  writeFileSync(path.join(dir, legacyJournalRecordName('a')), legacy('a', 1));
  // The name of c holding b: a name two ids shared.
  writeFileSync(path.join(dir, legacyJournalRecordName('c')), legacy('b', 2));
  await journal.remove(await journal.write(settleOf('c', 3)), 'c');
  assert.deepEqual(legacies(), [legacyJournalRecordName('a'), legacyJournalRecordName('c')].sort());
  const migrated = Object.fromEntries(
    (await journal.pending()).map(({ path: p, request }) => [request.reservationId, [path.basename(p), Number(request.used)]]),
  );
  assert.deepEqual(migrated, { a: [journalRecordName('a'), 1], b: [journalRecordName('b'), 2] });
  assert.deepEqual(legacies(), []);
  writeFileSync(path.join(dir, legacyJournalRecordName('a')), legacy('a', 1));
  await journal.remove(path.join(dir, journalRecordName('a')), 'a');
  assert.deepEqual([legacies(), records(dir)], [[], [journalRecordName('b')]]);
});

// Boundary.

test('CR-BOUNDARY-001 a call with no actual settles nothing and throws', async () => {
  const model = `gpt-recovery-${process.pid}`;
  await putPrice(earmark, 'openai', model);
  const id = budgetId('boundary');
  await earmark.putBudget(id, 1_000_000, 'usd_micros');
  const dir = journalDir();
  const proxy = await proxied();
  const via = client({ target: proxy.target, journalDir: dir });
  try {
    const openai = new OpenAI({ baseURL: FAKE_OPENAI_URL, apiKey: 'sk-fake', timeout: 10_000, maxRetries: 0 });
    const llm = metered(openai, via, id);
    const error = await llm.chat.completions.create({ model, max_tokens: 100, messages: [{ role: 'user', content: 'fail:503' }] }).catch((e) => e);
    assert.equal(error.status, 503);
    const [sent, ...more] = proxy.settles();
    // "fail:503" is 8 characters: ceil(8 / 3) + 4 + 3 = 10 prompt tokens at 2, charged
    // before the call was sent; 100 output tokens at 8 still held.
    assert.deepEqual([more.length, sent.outcome, sent.used, sent.usage], [0, wire.Outcome.OUTCOME_UNKNOWN, 20n, undefined]);
    assert.deepEqual(await ledger(earmark, id), [20, 800, 1]);
    assert.deepEqual(records(dir), []);
  } finally {
    via.close();
  }
});

// flush(timeoutMs): a shutdown waits a bounded time and leaves what did not land on disk.

test('flush() resolves false while a settle waits on an unresponsive sidecar and leaves its record', async () => {
  const { id, rid } = await holdOn('flush-late');
  const dir = journalDir();
  const proxy = await proxied();
  const release = gate();
  proxy.faults.Settle.push(held(release.opened));
  const stuck = client({ target: proxy.target, journalDir: dir });
  const settling = stuck.settle(rid, 31_200);
  await until(() => proxy.seen.Settle.length === 1, 'the settle sent');
  assert.equal(await stuck.flush(50), false);
  assert.deepEqual(records(dir), [journalRecordName(rid)]);
  // The worker exits; the next one replays the record.
  const next = client({ journalDir: dir });
  try {
    assert.equal(await next.recover(), 1);
  } finally {
    next.close();
  }
  release.open();
  assert.equal((await settling).state, 'SETTLED');
  stuck.close();
  assert.deepEqual(records(dir), []);
  assert.deepEqual(await ledger(earmark, id), [31_200, 0, 0]);
});

test('flush() resolves true once the settles in flight landed, hold() ones too', async () => {
  const { id, rid } = await holdOn('flush-landed');
  const dir = journalDir();
  const proxy = await proxied();
  const release = gate();
  proxy.faults.Settle.push(held(release.opened), held(release.opened));
  const via = client({ target: proxy.target, journalDir: dir });
  try {
    const settling = via.settle(rid, 31_200);
    const other = budgetId('flush-hold');
    await earmark.putBudget(other, 10_000, 'tokens');
    const holding = hold(via, other, 5_000, (h) => {
      h.used = 1_000;
    });
    await until(() => proxy.seen.Settle.length === 2, 'both settles sent');
    const flushing = via.flush(60_000);
    release.open();
    assert.equal(await flushing, true);
    await Promise.all([settling, holding]);
    assert.deepEqual(records(dir), []);
    assert.deepEqual([await ledger(earmark, id), await ledger(earmark, other)], [[31_200, 0, 0], [1_000, 0, 0]]);
  } finally {
    via.close();
  }
});

test('flush() with nothing under way resolves true, and refuses a timeout out of range', async () => {
  const idle = client();
  try {
    assert.equal(await idle.flush(0), true);
    await assert.rejects(idle.flush(-1), RangeError);
    await assert.rejects(idle.flush(Number.NaN), RangeError);
  } finally {
    idle.close();
  }
});
