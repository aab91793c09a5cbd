// What the tests share: a client on the live sidecar the pytest harness started
// (EARMARK_TARGET, EARMARK_ADMIN_TARGET) and budget ids of their own.
import { randomUUID } from 'node:crypto';
import { EarmarkClient } from '../dist/index.js';

export function client(options = {}) {
  return new EarmarkClient(options);
}

/** A budget id no other test uses. */
export function budgetId(name) {
  return `ts/${name}/${randomUUID().slice(0, 8)}`;
}

export const FAKE_OPENAI_URL = process.env.FAKE_OPENAI_URL;
