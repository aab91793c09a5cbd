// The client against a canned Budget server (no sidecar): retries resend the same
// idempotency key, the worker token goes as metadata, and a failure's ErrorInfo trailer
// picks the error class.
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { Metadata, Server, ServerCredentials, status } from '@grpc/grpc-js';
import { EarmarkClient, HoldInDoubtError, wire } from '../dist/esm/index.js';

const seen = [];
let server;
let target;

// google.rpc.Status { code, message, details: [Any { type_url, value: ErrorInfo }] },
// written by hand as the sidecar's grpcio-status writes it.
function field(number, bytes) {
  return Buffer.concat([Buffer.from([(number << 3) | 2, bytes.length]), bytes]);
}
function statusDetails(code, reason, metadata) {
  const entries = Object.entries(metadata).map(([k, v]) => field(3, Buffer.concat([field(1, Buffer.from(k)), field(2, Buffer.from(v))])));
  const info = Buffer.concat([field(1, Buffer.from(reason)), field(2, Buffer.from('earmark')), ...entries]);
  const any = Buffer.concat([field(1, Buffer.from('type.googleapis.com/google.rpc.ErrorInfo')), field(2, info)]);
  return Buffer.concat([Buffer.from([0x08, code]), field(3, any)]);
}

const plan = [];
const reply = {
  admitted: true, reservationId: 'r-1', amount: 10n, remaining: 90n, reason: 0, message: '',
  expiresAt: new Date(Date.now() + 60_000), estimateSource: 1, priceVersion: 0n, retryAfter: undefined,
  budgetId: 'b', refusedBudgetId: '', overagePolicy: 0, overLimit: false, charged: 0n,
  maxOutputTokens: 0n, degraded: false, resetsAt: undefined, wouldRefuse: false, wouldRefuseReason: 0,
};

before(async () => {
  server = new Server();
  const fail = (callback, code) => callback({ code, details: 'canned' });
  server.addService(wire.BudgetService, {
    reserve(call, callback) {
      seen.push({ key: call.request.idempotencyKey, auth: call.metadata.get('authorization')[0] });
      const next = plan.shift() ?? 'ok';
      if (next === 'unavailable') return fail(callback, status.UNAVAILABLE);
      if (next === 'slow') return setTimeout(() => callback(null, reply), 400);
      return callback(null, reply);
    },
    charge(call, callback) {
      const trailer = new Metadata();
      trailer.set('grpc-status-details-bin', statusDetails(status.FAILED_PRECONDITION, 'HOLD_IN_DOUBT', { reservation_id: 'r-1', state: 'IN_DOUBT' }));
      callback({ code: status.FAILED_PRECONDITION, details: 'in doubt', metadata: trailer });
    },
    renew: (call, callback) => fail(callback, status.UNIMPLEMENTED),
    settle: (call, callback) => fail(callback, status.UNIMPLEMENTED),
  });
  const port = await new Promise((resolve, reject) =>
    server.bindAsync('127.0.0.1:0', ServerCredentials.createInsecure(), (e, p) => (e ? reject(e) : resolve(p))),
  );
  target = `127.0.0.1:${port}`;
});
after(() => server.forceShutdown());

test('UNAVAILABLE is retried with the same idempotency key, and the token is sent', async () => {
  seen.length = 0;
  plan.push('unavailable', 'unavailable');
  const earmark = new EarmarkClient({ target, token: 'sekret', retry: { backoffBaseMs: 1, backoffMaxMs: 5 } });
  const held = await earmark.reserve('b', 10);
  earmark.close();
  assert.equal(held.reservationId, 'r-1');
  assert.equal(seen.length, 3);
  assert.equal(new Set(seen.map((s) => s.key)).size, 1);
  assert.deepEqual(seen.map((s) => s.auth), ['Bearer sekret', 'Bearer sekret', 'Bearer sekret']);
});

test('DEADLINE_EXCEEDED is retried with the same idempotency key', async () => {
  seen.length = 0;
  plan.push('slow');
  const earmark = new EarmarkClient({ target, timeoutMs: 200, retry: { backoffBaseMs: 1, backoffMaxMs: 5 } });
  const held = await earmark.reserve('b', 10);
  earmark.close();
  assert.equal(held.admitted, true);
  assert.equal(seen.length, 2);
  assert.equal(seen[0].key, seen[1].key);
});

test('the attempts are bounded: the last UNAVAILABLE is thrown', async () => {
  seen.length = 0;
  plan.push('unavailable', 'unavailable', 'unavailable');
  const earmark = new EarmarkClient({ target, retry: { attemptsMax: 3, backoffBaseMs: 1, backoffMaxMs: 5 } });
  const error = await earmark.reserve('b', 10).catch((e) => e);
  earmark.close();
  assert.equal(error.code, status.UNAVAILABLE);
  assert.equal(error.name, 'UnavailableError');
  assert.equal(seen.length, 3);
  plan.length = 0;
});

test('the ErrorInfo in grpc-status-details-bin picks the class below the code', async () => {
  const earmark = new EarmarkClient({ target });
  const error = await earmark.charge('r-1', 5).catch((e) => e);
  earmark.close();
  assert.ok(error instanceof HoldInDoubtError, String(error));
  assert.equal(error.reason, 'HOLD_IN_DOUBT');
  assert.deepEqual(error.about, { reservation_id: 'r-1', state: 'IN_DOUBT' });
});
