import assert from 'node:assert/strict';
import { mkdtempSync, readdirSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { after, test } from 'node:test';
import { Journal, journalRecordName, QUARANTINE, wire } from '../dist/esm/index.js';
import { budgetId, client } from './helpers.mjs';

const earmark = client();
const folders = [];
after(() => {
  earmark.close();
  for (const folder of folders) rmSync(folder, { recursive: true, force: true });
});

/** A journal directory of the test's own, removed when the file's tests end. */
function journalDir() {
  const folder = mkdtempSync(path.join(tmpdir(), 'earmark-journal-'));
  folders.push(folder);
  return path.join(folder, 'journal');
}

/** The records (not the quarantine folder) in dir. */
function records(dir) {
  return readdirSync(dir).filter((name) => name.endsWith('.json'));
}

/** The warnings process.emitWarning raised while fn ran. */
async function warningsOf(fn) {
  const seen = [];
  const listen = (warning) => seen.push(warning.message);
  process.on('warning', listen);
  try {
    const result = await fn();
    // Warnings are emitted on the next tick; wait for them before counting.
    await new Promise((resolve) => setImmediate(resolve));
    return { result, warnings: seen };
  } finally {
    process.off('warning', listen);
  }
}

/** A settle request of used tokens, succeeded, as the SDK sends it. */
function settleOf(reservationId, used) {
  return { reservationId, used: BigInt(used), outcome: wire.Outcome.OUTCOME_SUCCEEDED, usage: undefined };
}

// What the Python SDK's Journal.write(SettleRequest(reservation_id="res-1", used=31200,
// outcome=OUTCOME_SUCCEEDED)) leaves on disk: its file name and its bytes
// (tests/client/test_recovery_profile.py holds the same two).
const PYTHON_NAME = 'v2-7d3decde0c1e575f39de6e67f49c425ecb053e7d1645582c686867f23ce1ff31.json';
const PYTHON_BYTES = Buffer.from('{"version":2,"reservation_id":"res-1","settle":"CgVyZXMtMRDg8wEYAQ=="}');
// The same request as the first format of both SDKs wrote it, which pending() moves.
const LEGACY_NAME = '7d3decde0c1e575f39de6e67f49c425e.settle';
const LEGACY_BYTES = Buffer.from('0a057265732d3110e0f3011801', 'hex');

test('a record is written with mode 0600 and holds the request', async () => {
  const dir = journalDir();
  const request = settleOf('res-1', 31_200);
  const record = await new Journal(dir).write(request);
  const stored = JSON.parse(readFileSync(record, 'utf8'));
  assert.equal(record, path.join(dir, PYTHON_NAME));
  assert.equal(statSync(record).mode & 0o777, 0o600);
  assert.equal(statSync(dir).mode & 0o777, 0o700);
  assert.deepEqual([stored.version, stored.reservation_id], [2, 'res-1']);
  assert.deepEqual(wire.SettleRequest.decode(Buffer.from(stored.settle, 'base64')), request);
  assert.deepEqual(readdirSync(dir), [PYTHON_NAME]);
});

test('a record has the Python SDK name and bytes, so either SDK replays the other', async () => {
  assert.equal(journalRecordName('res-1'), PYTHON_NAME);
  const dir = journalDir();
  const record = await new Journal(dir).write(settleOf('res-1', 31_200));
  assert.deepEqual(readFileSync(record), PYTHON_BYTES);
  const other = journalDir();
  const journal = new Journal(other);
  await journal.pending();
  writeFileSync(path.join(other, PYTHON_NAME), PYTHON_BYTES, { mode: 0o600 });
  assert.deepEqual(await journal.pending(), [{ path: path.join(other, PYTHON_NAME), request: settleOf('res-1', 31_200) }]);
});

test('a record of the first format is moved to its standard name and read', async () => {
  const dir = journalDir();
  const journal = new Journal(dir);
  await journal.pending();
  writeFileSync(path.join(dir, LEGACY_NAME), LEGACY_BYTES, { mode: 0o600 });
  assert.deepEqual(await journal.pending(), [{ path: path.join(dir, PYTHON_NAME), request: settleOf('res-1', 31_200) }]);
  assert.deepEqual([readdirSync(dir), readFileSync(path.join(dir, PYTHON_NAME))], [[PYTHON_NAME], PYTHON_BYTES]);
});

test('an unreadable record is moved to quarantine with a warning and never sent', async () => {
  const dir = journalDir();
  const journaled = client({ journalDir: dir });
  try {
    await new Journal(dir).pending();
    writeFileSync(path.join(dir, 'bad.settle'), Buffer.from('\xff\xff not protobuf', 'latin1'));
    const { result, warnings } = await warningsOf(() => journaled.recover());
    assert.equal(result, 0);
    assert.deepEqual(records(dir), []);
    assert.deepEqual(readdirSync(path.join(dir, QUARANTINE)), ['bad.settle']);
    assert.equal(warnings.length, 1);
    assert.match(warnings[0], /^earmark journal: .*bad\.settle cannot be read \(\w+: .+\); moved to .*quarantine \(1 quarantined by this client\)$/);
  } finally {
    journaled.close();
  }
});

test('a record left by a dead client is settled once by the next client recover()', async () => {
  const id = budgetId('journal-dead');
  await earmark.putBudget(id, 100_000, 'tokens');
  const held = await earmark.reserve(id, 40_000, { leaseSeconds: 60 });
  const dir = journalDir();
  // The dead client: its Settle on disk, never sent.
  await new Journal(dir).write(settleOf(held.reservationId, 31_200));
  const before = await earmark.getBudget(id);
  assert.deepEqual([before.used, before.held], [0, 40_000]);

  const next = client({ journalDir: dir });
  try {
    assert.equal(await next.recover(), 1);
    assert.deepEqual(records(dir), []);
    const after = await earmark.getBudget(id);
    assert.deepEqual([after.used, after.held, after.remaining, after.openReservations], [31_200, 0, 68_800, 0]);
    assert.equal(await next.recover(), 0);
    const again = await earmark.getBudget(id);
    assert.deepEqual([again.used, again.held, again.remaining, again.openReservations], [31_200, 0, 68_800, 0]);
  } finally {
    next.close();
  }
});

test('a settle through a journaled client leaves no record once answered', async () => {
  const id = budgetId('journal-settle');
  await earmark.putBudget(id, 10_000, 'tokens');
  const dir = journalDir();
  const journaled = client({ journalDir: dir });
  try {
    const held = await journaled.reserve(id, 5_000);
    const settled = await journaled.settle(held.reservationId, 1_000);
    assert.deepEqual(settled, { charged: 1_000, released: 4_000, overshoot: 0, state: 'SETTLED', priceVersion: 0 });
    assert.deepEqual(records(dir), []);
    assert.equal((await earmark.getBudget(id)).used, 1_000);
  } finally {
    journaled.close();
  }
});

test('a journal that cannot be written is a warning and the settle is sent all the same', async () => {
  const id = budgetId('journal-unwritable');
  await earmark.putBudget(id, 10_000, 'tokens');
  const dir = journalDir();
  const journaled = client({ journalDir: dir });
  try {
    const held = await journaled.reserve(id, 5_000);
    await journaled.recover(); // the directory made
    rmSync(dir, { recursive: true, force: true });
    writeFileSync(dir, 'not a directory');
    const { result, warnings } = await warningsOf(() => journaled.settle(held.reservationId, 1_000));
    assert.equal(result.state, 'SETTLED');
    assert.equal(warnings.length, 1);
    assert.match(warnings[0], new RegExp(`^earmark journal: the settle of ${held.reservationId} could not be written .*; sending it without a record$`));
    assert.equal((await earmark.getBudget(id)).used, 1_000);
  } finally {
    journaled.close();
  }
});

test('a record refused for good is removed and one the sidecar never answered stays', async () => {
  const dir = journalDir();
  // Nothing listens on port 1: the settle fails for now, so its record stays.
  const unreachable = client({ target: '127.0.0.1:1', journalDir: dir, timeoutMs: 200, retry: { attemptsMax: 1 } });
  try {
    const error = await unreachable.settle('res-gone', 10).catch((e) => e);
    assert.equal(error.name, 'UnavailableError');
    assert.deepEqual(records(dir), [journalRecordName('res-gone')]);
    const { result, warnings } = await warningsOf(() => unreachable.recover());
    assert.equal(result, 0);
    assert.deepEqual(records(dir), [journalRecordName('res-gone')]);
    assert.equal(warnings.length, 1);
    assert.match(warnings[0], /^earmark journal: settle of res-gone not sent yet: UNAVAILABLE: /);
  } finally {
    unreachable.close();
  }
  // The live sidecar knows no such hold (NOT_FOUND): sending it again cannot help.
  const live = client({ journalDir: dir });
  try {
    assert.equal(await live.recover(), 1);
    assert.deepEqual(records(dir), []);
  } finally {
    live.close();
  }
});
