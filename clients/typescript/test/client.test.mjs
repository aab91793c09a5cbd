import assert from 'node:assert/strict';
import { after, test } from 'node:test';
import { status } from '@grpc/grpc-js';
import {
  BudgetNotFoundError,
  ClientError,
  EarmarkClient,
  EarmarkClientError,
  KeyReusedError,
  NotFoundError,
  ReservationNotFoundError,
  UnavailableError,
  backoffMs,
} from '../dist/esm/index.js';
import { refusalStatus } from '../dist/esm/metered.js';
import { budgetId, client } from './helpers.mjs';

const earmark = client();
after(() => earmark.close());

test('reserve, charge and settle round trip', async () => {
  const id = budgetId('round-trip');
  await earmark.putBudget(id, 100_000, 'tokens');
  const held = await earmark.reserve(id, 40_000, { leaseSeconds: 60 });
  assert.equal(held.admitted, true);
  assert.equal(held.amount, 40_000);
  assert.equal(held.remaining, 60_000);
  assert.equal(held.estimateSource, 'CALLER');
  assert.ok(held.expiresAt > new Date());
  const step = await earmark.charge(held.reservationId, 12_000);
  assert.deepEqual([step.charged, step.capped, step.totalCharged, step.holdRemaining], [12_000, false, 12_000, 28_000]);
  const later = await earmark.renew(held.reservationId, 90);
  assert.ok(later.getTime() > Date.now() + 80_000);
  const settled = await earmark.settle(held.reservationId, 31_200);
  assert.deepEqual(settled, { charged: 31_200, released: 8_800, overshoot: 0, state: 'SETTLED', priceVersion: 0 });
  // Settled again with the same used: the same answer, nothing changed.
  assert.deepEqual(await earmark.settle(held.reservationId, 31_200), settled);
  const state = await earmark.getBudget(id);
  assert.deepEqual([state.used, state.held, state.remaining, state.openReservations], [31_200, 0, 68_800, 0]);
});

test('a retried charge with the same key charges once', async () => {
  const id = budgetId('idempotent');
  await earmark.putBudget(id, 10_000, 'tokens');
  const held = await earmark.reserve(id, 5_000, { idempotencyKey: 'job-1' });
  const again = await earmark.reserve(id, 5_000, { idempotencyKey: 'job-1' });
  assert.equal(again.reservationId, held.reservationId);
  const one = await earmark.charge(held.reservationId, 1_000, { idempotencyKey: 'step-1' });
  const two = await earmark.charge(held.reservationId, 1_000, { idempotencyKey: 'step-1' });
  assert.deepEqual(two, one);
  await earmark.settle(held.reservationId, 1_000);
  assert.equal((await earmark.getBudget(id)).used, 1_000);
});

test('a refusal is a value, not an error', async () => {
  const id = budgetId('refusal');
  await earmark.putBudget(id, 50_000, 'tokens');
  const first = await earmark.reserve(id, 30_000);
  assert.equal(first.admitted, true);
  const refused = await earmark.reserve(id, 40_000);
  assert.equal(refused.admitted, false);
  assert.equal(refused.reason, 'INSUFFICIENT_BUDGET');
  assert.equal(refused.remaining, 20_000);
  assert.equal(refused.refusedBudgetId, id);
  assert.match(refused.message, /40000/);
  await earmark.settle(first.reservationId, 0);
  const state = await earmark.getBudget(id);
  assert.deepEqual([state.used, state.held], [0, 0]);
});

test("a budget's policies are put, read back and answered with each Reserve", async () => {
  const id = budgetId('policies');
  const put = await earmark.putBudget(id, 1_000, 'tokens', {
    period: 'MONTH',
    timezone: 'Europe/Berlin',
    periodAnchor: 15,
    thresholdBps: [9_500, 8_000],
    mode: 'OBSERVE',
    admissionsPerMinute: 100,
    unitsPerMinute: 5_000,
  });
  assert.deepEqual(
    [put.period, put.timezone, put.periodAnchor, put.thresholdBps, put.mode, put.admissionsPerMinute, put.unitsPerMinute],
    ['MONTH', 'Europe/Berlin', 15, [8_000, 9_500], 'OBSERVE', 100, 5_000],
  );
  const now = new Date();
  assert.ok(put.periodStart <= now && now < put.resetsAt, `${put.periodStart} ${put.resetsAt}`);
  // OBSERVE: the second hold does not fit and is admitted anyway, saying so.
  const fits = await earmark.reserve(id, 600);
  const over = await earmark.reserve(id, 600);
  assert.deepEqual([fits.admitted, fits.wouldRefuse, fits.wouldRefuseReason], [true, false, 'UNSPECIFIED']);
  assert.deepEqual([over.admitted, over.wouldRefuse, over.wouldRefuseReason], [true, true, 'INSUFFICIENT_BUDGET']);
  assert.deepEqual([fits.resetsAt, over.resetsAt], [put.resetsAt, put.resetsAt]);
  await earmark.settle(fits.reservationId, 0);
  await earmark.settle(over.reservationId, 0);
  // Both Reserves were admitted this period (issue 47's admissions).
  const read = await earmark.getBudget(id);
  assert.deepEqual(read, { ...put, used: 0, held: 0, remaining: 1_000, openReservations: 0, admissions: 2 });

  // Nothing given: never resets, enforces, no notices and no rate bound.
  const plain = await earmark.putBudget(budgetId('plain'), 1_000, 'tokens');
  assert.deepEqual(
    [plain.period, plain.timezone, plain.periodAnchor, plain.periodStart, plain.resetsAt, plain.mode,
      plain.thresholdBps, plain.admissionsPerMinute, plain.unitsPerMinute],
    ['NEVER', '', 0, null, null, 'ENFORCE', [], null, null],
  );

  // A rate window refuses past its minute; the refusal says when the window and the
  // budget's day have room again.
  const rated = budgetId('rated');
  const day = await earmark.putBudget(rated, 1_000, 'tokens', { period: 'DAY', admissionsPerMinute: 1 });
  const first = await earmark.reserve(rated, 10);
  const second = await earmark.reserve(rated, 10);
  assert.deepEqual([first.admitted, first.resetsAt, first.wouldRefuse], [true, day.resetsAt, false]);
  assert.deepEqual([second.admitted, second.reason, second.resetsAt], [false, 'RATE_LIMITED', day.resetsAt]);
  assert.ok(second.retryAfterMs > 0, String(second.retryAfterMs));
  await earmark.settle(first.reservationId, 0);
});

test('errors are classes by their ErrorInfo reason', async () => {
  const unknown = '00000000-0000-4000-8000-000000000000';
  const error = await earmark.settle(unknown, 10).catch((e) => e);
  assert.ok(error instanceof ReservationNotFoundError, String(error));
  assert.ok(error instanceof NotFoundError);
  assert.ok(error instanceof ClientError);
  assert.ok(error instanceof EarmarkClientError);
  assert.equal(error.name, 'ReservationNotFoundError');
  assert.equal(error.code, status.NOT_FOUND);
  assert.equal(error.reason, 'RESERVATION_NOT_FOUND');
  assert.equal(error.about.reservation_id, unknown);

  const missing = budgetId('missing');
  const notFound = await earmark.reserve(missing, 10).catch((e) => e);
  assert.ok(notFound instanceof BudgetNotFoundError, String(notFound));
  assert.equal(notFound.reason, 'BUDGET_NOT_FOUND');
  assert.equal(notFound.about.budget_id, missing);

  const id = budgetId('key-reused');
  await earmark.putBudget(id, 1_000, 'tokens');
  const held = await earmark.reserve(id, 100, { idempotencyKey: 'k' });
  const reused = await earmark.reserve(id, 200, { idempotencyKey: 'k' }).catch((e) => e);
  assert.ok(reused instanceof KeyReusedError, String(reused));
  assert.equal(reused.reason, 'KEY_REUSED');
  await earmark.settle(held.reservationId, 0);
});

test('a target where nothing listens fails UNAVAILABLE within the deadline, naming it', async () => {
  const nobody = new EarmarkClient({ target: '127.0.0.1:1', timeoutMs: 300 });
  const started = Date.now();
  const error = await nobody.reserve('x', 1).catch((e) => e);
  nobody.close();
  assert.ok(error instanceof UnavailableError, String(error));
  assert.match(error.message, /127\.0\.0\.1:1/);
  assert.ok(Date.now() - started < 3_000);
});

test('the target comes from EARMARK_TARGET, else 127.0.0.1:50051', () => {
  const saved = process.env.EARMARK_TARGET;
  try {
    delete process.env.EARMARK_TARGET;
    const plain = new EarmarkClient();
    assert.equal(plain.target, '127.0.0.1:50051');
    plain.close();
    process.env.EARMARK_TARGET = '127.0.0.1:5999';
    const fromEnv = new EarmarkClient();
    assert.equal(fromEnv.target, '127.0.0.1:5999');
    fromEnv.close();
  } finally {
    process.env.EARMARK_TARGET = saved;
  }
});

test('backoff is full jitter, doubling, bounded', () => {
  const policy = { attemptsMax: 5, backoffBaseMs: 50, backoffMaxMs: 2000 };
  assert.equal(backoffMs(policy, 0, () => 1), 50);
  assert.equal(backoffMs(policy, 3, () => 1), 400);
  assert.equal(backoffMs(policy, 10, () => 1), 2000);
  assert.equal(backoffMs(policy, 10, () => 0), 0);
  assert.throws(() => new EarmarkClient({ retry: { attemptsMax: 0 } }), RangeError);
});

test('updateBudget changes only the settings given', async () => {
  const id = budgetId('update');
  const put = await earmark.putBudget(id, 1_000, 'tokens', {
    period: 'MONTH',
    thresholdBps: [8_000],
    thresholdBasis: 'USED',
    mode: 'OBSERVE',
    admissionsPerMinute: 60,
  });
  const raised = await earmark.updateBudget(id, { limit: 5_000 });
  assert.deepEqual(raised, { ...put, limit: 5_000, remaining: 5_000 });
  const unbound = await earmark.updateBudget(id, { admissionsPerMinute: null });
  assert.deepEqual([unbound.admissionsPerMinute, unbound.limit, unbound.thresholdBasis], [null, 5_000, 'USED']);
  const starred = await earmark.updateBudget(id, { limit: 10, unit: 'tokens' }, ['*']);
  assert.deepEqual(
    [starred.limit, starred.period, starred.thresholdBps, starred.thresholdBasis, starred.mode, starred.refusals],
    [10, 'NEVER', [], 'COMMITTED', 'ENFORCE', 0],
  );
  await assert.rejects(earmark.updateBudget(id, {}), RangeError);
  await assert.rejects(earmark.updateBudget(budgetId('nobody'), { limit: 1 }), BudgetNotFoundError);
});

test('run limits are put and read, and each refuses with its reason (issue 47)', async () => {
  const closesAt = new Date('2036-01-01T00:00:00Z');
  const id = budgetId('run');
  const put = await earmark.putBudget(id, 1_000, 'tokens', { maxOpenHolds: 1, maxAdmissions: 2, closesAt });
  assert.deepEqual(
    [put.maxOpenHolds, put.maxAdmissions, put.closesAt, put.admissions, put.templateId, put.changedByHand],
    [1, 2, closesAt, 0, '', false],
  );
  assert.deepEqual([put.limitUntil, put.limitAfter, put.limitReason], [null, null, '']);
  const first = await earmark.reserve(id, 10);
  const tooMany = await earmark.reserve(id, 10);
  assert.deepEqual([first.admitted, tooMany.admitted, tooMany.reason], [true, false, 'TOO_MANY_OPEN']);
  await earmark.settle(first.reservationId, 10);
  const second = await earmark.reserve(id, 10);
  await earmark.settle(second.reservationId, 10);
  const spent = await earmark.reserve(id, 10);
  assert.deepEqual([second.admitted, spent.admitted, spent.reason], [true, false, 'ADMISSIONS_SPENT']);
  assert.equal((await earmark.getBudget(id)).admissions, 2);

  // updateBudget names only what it is given; null clears; a closesAt past closes it.
  const changed = await earmark.updateBudget(id, { maxAdmissions: null, maxOpenHolds: 3 });
  assert.deepEqual([changed.maxOpenHolds, changed.maxAdmissions, changed.closesAt], [3, null, closesAt]);
  const closed = await earmark.updateBudget(id, { closesAt: new Date(Date.now() - 60_000) });
  assert.ok(closed.closesAt < new Date(), String(closed.closesAt));
  const refused = await earmark.reserve(id, 10);
  assert.deepEqual([refused.admitted, refused.reason], [false, 'CLOSED']);

  // A metered call refused by a limit that passes on its own is 429; else 402.
  assert.deepEqual(
    ['RATE_LIMITED', 'TOO_MANY_OPEN', 'ADMISSIONS_SPENT', 'CLOSED', 'INSUFFICIENT_BUDGET', 'LIMIT_UNAVAILABLE'].map(
      refusalStatus,
    ),
    [429, 429, 402, 402, 402, 402],
  );
});
