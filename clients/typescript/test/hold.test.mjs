import assert from 'node:assert/strict';
import { after, test } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import { Hold, hold, InvalidArgumentError, RefusedError, wire } from '../dist/esm/index.js';
import { budgetId, client, holdsOf } from './helpers.mjs';

const earmark = client();
after(() => earmark.close());

test('hold() settles SUCCEEDED with what the job used', async () => {
  const id = budgetId('hold-ok');
  await earmark.putBudget(id, 100_000, 'tokens');
  let seen;
  const answer = await hold(earmark, id, 40_000, async (h) => {
    seen = h;
    const step = await h.charge(10_000);
    assert.equal(step.capped, false);
    h.used = 31_200;
    return 'done';
  });
  assert.equal(answer, 'done');
  assert.deepEqual([seen.settled.charged, seen.settled.released, seen.settled.state], [31_200, 8_800, 'SETTLED']);
  const state = await earmark.getBudget(id);
  assert.deepEqual([state.used, state.held, state.openReservations], [31_200, 0, 0]);
});

test('hold() settles at what was charged when the job never said', async () => {
  const id = budgetId('hold-charged');
  await earmark.putBudget(id, 100_000, 'tokens');
  await hold(earmark, id, 40_000, async (h) => {
    await h.charge(7_000);
    await h.charge(5_000);
  });
  const state = await earmark.getBudget(id);
  assert.deepEqual([state.used, state.held], [12_000, 0]);
});

test('hold() settles FAILED in finally when the job throws, and rethrows', async () => {
  const id = budgetId('hold-throw');
  await earmark.putBudget(id, 100_000, 'tokens');
  let seen;
  await assert.rejects(
    hold(earmark, id, 40_000, async (h) => {
      seen = h;
      await h.charge(9_000);
      throw new Error('the model fell over');
    }),
    /the model fell over/,
  );
  assert.equal(seen.settled.state, 'SETTLED');
  assert.equal(seen.settled.charged, 9_000);
  const state = await earmark.getBudget(id);
  assert.deepEqual([state.used, state.held, state.openReservations], [9_000, 0, 0]);
});

test('hold() settles CANCELLED when the caller aborts', async () => {
  const id = budgetId('hold-abort');
  await earmark.putBudget(id, 100_000, 'tokens');
  const controller = new AbortController();
  let seen;
  await assert.rejects(
    hold(
      earmark,
      id,
      40_000,
      async (h) => {
        seen = h;
        await h.charge(3_000);
        setTimeout(() => controller.abort(), 20);
        await sleep(10_000, undefined, { signal: h.signal });
      },
      { signal: controller.signal },
    ),
    { name: 'AbortError' },
  );
  assert.equal(seen.settled.charged, 3_000);
  const state = await earmark.getBudget(id);
  assert.deepEqual([state.used, state.held], [3_000, 0]);
});

test('hold() throws a refusal as RefusedError, or hands it back', async () => {
  const id = budgetId('hold-refused');
  await earmark.putBudget(id, 10_000, 'tokens');
  let ran = false;
  const error = await hold(earmark, id, 20_000, () => (ran = true)).catch((e) => e);
  assert.ok(error instanceof RefusedError, String(error));
  assert.equal(error.reason, 'INSUFFICIENT_BUDGET');
  assert.equal(error.refusal.remaining, 10_000);
  const refusal = await hold(earmark, id, 20_000, () => (ran = true), { returnRefusal: true });
  assert.equal(refusal.admitted, false);
  assert.equal(ran, false);
});

test('hold() renews the lease while the job outlives it', async () => {
  const id = budgetId('hold-renew');
  await earmark.putBudget(id, 100_000, 'tokens');
  await hold(
    earmark,
    id,
    10_000,
    async (h) => {
      await h.charge(1_000);
      await sleep(3_500); // past the 1.5 s lease twice over
      const step = await h.charge(1_000);
      assert.equal(step.totalCharged, 2_000);
      h.used = 2_000;
    },
    { leaseSeconds: 1.5 },
  );
  const state = await earmark.getBudget(id);
  assert.deepEqual([state.used, state.held], [2_000, 0]);
});

test('a hold closed under the job makes the next charge throw HoldLostError', async () => {
  const id = budgetId('hold-lost');
  await earmark.putBudget(id, 100_000, 'tokens');
  let seen;
  const error = await hold(earmark, id, 10_000, async (h) => {
    seen = h;
    await earmark.settle(h.reservationId, 0); // settled elsewhere, behind the job's back
    await h.charge(1_000);
  }).catch((e) => e);
  assert.equal(error.name, 'HoldLostError');
  assert.equal(error.reason, 'HOLD_SETTLED');
  assert.equal(seen.signal.aborted, true);
  const state = await earmark.getBudget(id);
  assert.deepEqual([state.used, state.held, state.openReservations], [0, 0, 0]);
});

test('label() adds labels to the open hold at once; a key it has with another value is refused and dropped', async () => {
  const id = budgetId('hold-label');
  await earmark.putBudget(id, 100_000, 'tokens');
  const h = await new Hold(earmark, id, 1_000, { labels: { team: 'a' }, leaseSeconds: 2 }).start();
  await h.label({ 'openai.response_id': 'resp_1' });
  const [labelled] = await holdsOf(id);
  const refused = await h.label({ team: 'b' }).catch((error) => error);
  // The refused label is not carried by the renewals after it (one every 2/3 s): the lease
  // goes on past its 2 s.
  await sleep(2_500);
  const [held] = await holdsOf(id);
  await h.finish();
  assert.deepEqual(labelled.labels, { team: 'a', 'openai.response_id': 'resp_1' });
  assert.ok(refused instanceof InvalidArgumentError, String(refused));
  assert.deepEqual([held.state, held.labels], [wire.ReservationState.RESERVATION_STATE_HELD, labelled.labels]);
});
