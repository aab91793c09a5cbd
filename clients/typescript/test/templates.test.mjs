// Budget templates and a temporary raise (issue 47) through the TypeScript SDK's admin
// calls: putTemplate, listTemplates, deleteTemplate, and updateBudget's limitUntil and
// reason, against the live sidecar.
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { after, test } from 'node:test';
import {
  BudgetNotFoundError,
  FailedPreconditionError,
  InvalidArgumentError,
  NotFoundError,
} from '../dist/esm/index.js';
import { budgetId, client } from './helpers.mjs';

const earmark = client();
after(() => earmark.close());

/** A template id and a pattern no other test uses. */
function fresh(name) {
  const tag = randomUUID().slice(0, 8);
  return { templateId: `ts-${name}-${tag}`, prefix: `ts/${name}-${tag}` };
}

test('putTemplate, listTemplates and deleteTemplate; a Reserve makes a matching budget from it', async () => {
  const { templateId, prefix } = fresh('template');
  const closesAt = new Date('2036-01-01T00:00:00Z');
  const settings = {
    limit: 1_000,
    unit: 'tokens',
    period: 'DAY',
    timezone: '',
    periodAnchor: 0,
    thresholdBps: [8000],
    thresholdBasis: 'COMMITTED',
    mode: 'ENFORCE',
    defaultEstimate: 100,
    maxOpenHolds: 2,
    closesAt,
  };
  const before = Date.now();
  const put = await earmark.putTemplate(templateId, `${prefix}/*`, settings);
  assert.equal(put.templateId, templateId);
  assert.equal(put.pattern, `${prefix}/*`);
  assert.deepEqual(put.settings, settings);
  assert.ok(put.version >= 1, String(put.version));
  assert.ok(put.updatedAt instanceof Date && put.updatedAt.getTime() >= before - 5_000, String(put.updatedAt));
  assert.equal(put.deletedAt, undefined);
  assert.equal('deletedAt' in put, false);

  // Put again: a greater version (versions only grow), its settings replaced whole (unset ones absent).
  const again = await earmark.putTemplate(templateId, `${prefix}/*`, { limit: 2_000, unit: 'tokens', maxOpenHolds: 2 });
  assert.ok(again.version > put.version, `${again.version} after ${put.version}`);
  assert.deepEqual(again.settings, {
    limit: 2_000,
    unit: 'tokens',
    period: 'NEVER',
    timezone: '',
    periodAnchor: 0,
    thresholdBps: [],
    thresholdBasis: 'COMMITTED',
    mode: 'ENFORCE',
    maxOpenHolds: 2,
  });

  const listed = (await earmark.listTemplates()).filter((t) => t.templateId === templateId);
  assert.deepEqual(listed, [again]);

  // A Reserve on an id the pattern matches makes the budget from the template.
  const made = `${prefix}/alice`;
  const held = await earmark.reserve(made, 400);
  assert.equal(held.admitted, true);
  assert.equal(held.remaining, 1_600);
  const state = await earmark.getBudget(made);
  assert.deepEqual(
    [state.limit, state.unit, state.used, state.held, state.maxOpenHolds, state.templateId, state.changedByHand],
    [2_000, 'tokens', 0, 400, 2, templateId, false],
  );
  await earmark.settle(held.reservationId, 300);
  assert.equal((await earmark.getBudget(made)).used, 300);

  // Another pattern over the same ids is refused; so is a bad template id.
  const overlap = fresh('overlap').templateId;
  await assert.rejects(earmark.putTemplate(overlap, `${prefix}/*`, { limit: 1, unit: 'tokens' }), (error) => {
    assert.ok(error instanceof FailedPreconditionError, String(error));
    assert.equal(error.reason, 'TEMPLATES_OVERLAP');
    return true;
  });
  await assert.rejects(
    earmark.putTemplate('no spaces allowed', `${fresh('bad').prefix}/*`, { limit: 1, unit: 'tokens' }),
    InvalidArgumentError,
  );

  // Deleted: answered with deletedAt, gone from the list; the budget made from it stays, and
  // no new one is made.
  const deleted = await earmark.deleteTemplate(templateId);
  assert.equal(deleted.templateId, templateId);
  assert.ok(deleted.deletedAt instanceof Date, String(deleted.deletedAt));
  assert.deepEqual(
    (await earmark.listTemplates()).filter((t) => t.templateId === templateId),
    [],
  );
  assert.equal((await earmark.getBudget(made)).templateId, templateId);
  await assert.rejects(earmark.reserve(`${prefix}/bob`, 1), BudgetNotFoundError);
  await assert.rejects(earmark.deleteTemplate(templateId), (error) => {
    assert.ok(error instanceof NotFoundError, String(error));
    assert.equal(error.reason, 'TEMPLATE_NOT_FOUND');
    return true;
  });
});

test('updateBudget with limitUntil raises the limit for an hour, with its reason', async () => {
  const id = budgetId('raise');
  await earmark.putBudget(id, 1_000, 'tokens');
  const until = new Date(Math.ceil(Date.now() / 1000) * 1000 + 3_600_000);
  const raised = await earmark.updateBudget(id, { limit: 5_000, limitUntil: until, reason: 'launch day' });
  assert.deepEqual(
    [raised.limit, raised.limitUntil, raised.limitAfter, raised.limitReason],
    [5_000, until, 1_000, 'launch day'],
  );
  const read = await earmark.getBudget(id);
  assert.deepEqual([read.limit, read.limitUntil, read.limitAfter, read.limitReason], [5_000, until, 1_000, 'launch day']);
  // The raise is room now: 4,000 fits past the limit before it.
  const held = await earmark.reserve(id, 4_000);
  assert.equal(held.admitted, true);
  await earmark.settle(held.reservationId, 0);

  // A plain update sends no limitUntil and no reason.
  const plain = await earmark.updateBudget(id, { thresholdBps: [9000] });
  assert.deepEqual(plain.thresholdBps, [9000]);

  // limitUntil needs the update to name limit; a reason past 256 characters is refused.
  await assert.rejects(earmark.updateBudget(id, { thresholdBps: [], limitUntil: until }), InvalidArgumentError);
  await assert.rejects(
    earmark.updateBudget(id, { limit: 6_000, limitUntil: until, reason: 'x'.repeat(257) }),
    InvalidArgumentError,
  );
  await assert.rejects(
    earmark.updateBudget(id, { limit: 6_000, limitUntil: new Date(Date.now() - 60_000) }),
    InvalidArgumentError,
  );
});
