import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import path from 'node:path';
import { after, test } from 'node:test';
import { promisify } from 'node:util';
import { budgetId, client } from './helpers.mjs';

const run = promisify(execFile);
const earmark = client();
after(() => earmark.close());

test('several Node processes racing on one small budget never exceed it', async () => {
  const id = budgetId('race');
  await earmark.putBudget(id, 50_000, 'tokens');
  const worker = path.join(import.meta.dirname, 'race-worker.mjs');
  // 4 processes of 5 jobs of 10,000 on 50,000: 5 are admitted, 15 refused.
  const outputs = await Promise.all(
    Array.from({ length: 4 }, () => run(process.execPath, [worker, id, '5'], { timeout: 60_000 })),
  );
  const summaries = outputs.map(({ stdout }) => JSON.parse(stdout));
  const total = (key) => summaries.reduce((sum, s) => sum + s[key], 0);
  assert.deepEqual([total('admitted'), total('refused'), total('capped')], [5, 15, 5]);
  const state = await earmark.getBudget(id);
  assert.equal(state.used, total('charged'));
  assert.deepEqual([state.used, state.held, state.remaining, state.openReservations], [50_000, 0, 0, 0]);
});
