// A journal only its owner can write: a directory another user could write is refused at
// start, and a file in it that is not a regular file of the worker's user no larger than a
// record (a FIFO, a symlink, a sparse file of gigabytes, another user's record) is set aside
// unread within a second, never replayed. The other user is a local one made for these
// tests (the machine's user is root) and removed after, unless it was there before.
import assert from 'node:assert/strict';
import { execFileSync, spawnSync } from 'node:child_process';
import {
  chmodSync,
  closeSync,
  constants,
  existsSync,
  mkdirSync,
  mkdtempSync,
  openSync,
  readdirSync,
  rmSync,
  symlinkSync,
  truncateSync,
  writeFileSync,
} from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { after, before, test } from 'node:test';
import { Journal, journalRecordName, QUARANTINE, wire } from '../dist/esm/index.js';
// The record's bytes and the first format's name are the journal module's own, not the root's.
import { encodeJournalRecord, legacyJournalRecordName } from '../dist/esm/journal.js';
import { budgetId, client, eventually } from './helpers.mjs';

const OTHER_USER = 'earmark-journal-test';
// A record's name on a sparse file of 1.5 GB: read whole, it would hold the client's start.
const HUGE_BYTES = 1536 * 2 ** 20;

const earmark = client();
const folders = [];
let madeUser = false;
before(() => {
  madeUser = spawnSync('id', ['-u', OTHER_USER]).status !== 0;
  if (madeUser) execFileSync('useradd', ['--system', '--no-create-home', '--shell', '/usr/sbin/nologin', OTHER_USER]);
});
after(() => {
  earmark.close();
  for (const folder of folders) rmSync(folder, { recursive: true, force: true });
  if (madeUser) spawnSync('userdel', [OTHER_USER]);
});

/** A folder the other user can make things in, as in /tmp, removed when the tests end. */
function shared() {
  const folder = mkdtempSync(path.join(tmpdir(), 'earmark-journal-owner-'));
  chmodSync(folder, 0o1777);
  folders.push(folder);
  return folder;
}

/** Runs command as the other user, a process of their own (runuser), failing if it fails. */
function asOther(command, args, input) {
  execFileSync('runuser', ['-u', OTHER_USER, '--', command, ...args], { input, stdio: ['pipe', 'ignore', 'pipe'] });
}

/** The names set aside in dir's quarantine/. */
function quarantined(dir) {
  const folder = path.join(dir, QUARANTINE);
  return existsSync(folder) ? readdirSync(folder).sort() : [];
}

function settleOf(reservationId, used) {
  return { reservationId, used: BigInt(used), outcome: wire.Outcome.OUTCOME_SUCCEEDED, usage: undefined };
}

test('a journal others can write or own is refused at start, the error naming it', () => {
  const folder = shared();
  const openToAll = path.join(folder, 'sticky');
  mkdirSync(openToAll);
  chmodSync(openToAll, 0o1777);
  const link = path.join(folder, 'link');
  symlinkSync(openToAll, link);
  const theirs = path.join(folder, 'theirs');
  asOther('mkdir', ['-m', '700', theirs]);
  for (const dir of [openToAll, link, theirs]) {
    assert.throws(
      () => client({ journalDir: dir }),
      (error) => error.name === 'UnsafeJournalError' && error.message.includes(dir),
      dir,
    );
  }
  assert.throws(() => new Journal(theirs), /owned by uid \d+, not this process's 0/);
});

test('a FIFO, a symlink and a 1.5 GB sparse file named as records are quarantined within a second', async () => {
  const folder = mkdtempSync(path.join(tmpdir(), 'earmark-journal-'));
  folders.push(folder);
  const journal = new Journal(path.join(folder, 'journal'));
  const mine = settleOf('mine', 5);
  await journal.write(mine);
  const at = (name) => path.join(journal.directory, name);
  const fifos = [at(journalRecordName('fifo')), at(legacyJournalRecordName('fifo'))];
  for (const fifo of fifos) execFileSync('mkfifo', ['-m', '600', fifo]);
  // Followed, the link would replay a settle the journal never wrote.
  const elsewhere = path.join(folder, 'elsewhere.json');
  writeFileSync(elsewhere, encodeJournalRecord(settleOf('linked', 1)));
  symlinkSync(elsewhere, at(journalRecordName('linked')));
  const huge = at(journalRecordName('huge'));
  writeFileSync(huge, '', { mode: 0o600 });
  truncateSync(huge, HUGE_BYTES);
  const names = [...fifos, at(journalRecordName('linked')), huge].map((p) => path.basename(p)).sort();
  const reading = journal.pending();
  try {
    await eventually(() => JSON.stringify(quarantined(journal.directory)) === JSON.stringify(names), 'the four files quarantined', 1_000);
    const found = await reading;
    assert.deepEqual(found.map((r) => r.request), [mine]);
    assert.equal(journal.quarantined, 4);
    assert.deepEqual(readdirSync(journal.directory).filter((n) => n.endsWith('.json')), [journalRecordName('mine')]);
  } finally {
    // A reader stuck on a FIFO (the fault under test) is let go, so the test ends.
    for (const fifo of fifos) {
      try {
        closeSync(openSync(fifo, constants.O_WRONLY | constants.O_NONBLOCK));
      } catch {
        // Moved to quarantine, or no reader: nothing to let go.
      }
    }
  }
});

test('a record planted by another user is never replayed; the worker\'s own beside it is', async () => {
  const id = budgetId('journal-planted');
  await earmark.putBudget(id, 100_000, 'tokens');
  const victim = await earmark.reserve(id, 40_000, { leaseSeconds: 60 });
  const own = await earmark.reserve(id, 40_000, { leaseSeconds: 60 });
  // A directory once shared (1777), since made private: the other user's record stays in it.
  const dir = path.join(shared(), 'journal');
  mkdirSync(dir);
  chmodSync(dir, 0o1777);
  const planted = path.join(dir, journalRecordName(victim.reservationId));
  asOther('tee', [planted], encodeJournalRecord(settleOf(victim.reservationId, 0)));
  chmodSync(dir, 0o700);
  await new Journal(dir).write(settleOf(own.reservationId, 1_000));
  const next = client({ journalDir: dir });
  try {
    assert.equal(await next.recover(), 1);
    assert.equal(await next.recover(), 0);
  } finally {
    next.close();
  }
  assert.deepEqual(quarantined(dir), [path.basename(planted)]);
  assert.deepEqual(readdirSync(dir).filter((n) => n.endsWith('.json')), []);
  const state = await earmark.getBudget(id);
  assert.deepEqual([state.used, state.held, state.openReservations], [1_000, 40_000, 1]);
});
