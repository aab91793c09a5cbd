// The TypeScript SDK's conformance adapter (docs/conformance.md, "The adapter protocol"):
// JSON lines on stdin, one EarmarkClient driven as a worker drives it (hold(), recover(),
// its journal and worker token), JSON lines on stdout. Plain Node ESM on the built SDK:
//
//   node tests/conformance/adapters/typescript.mjs
//
// (clients/typescript/dist is built by `make typescript`.) The adapter's own trouble goes to
// stderr; the SDK's warnings (a renewal or a settle that failed) reach it too, as Node
// prints them.
import { createRequire } from 'node:module';
import { createInterface } from 'node:readline';
import { setTimeout as sleep } from 'node:timers/promises';

import { ClientError, EarmarkClient, EarmarkClientError, hold, RefusedError, UnsafeJournalError } from '../../../clients/typescript/dist/esm/index.js';

// The SDK's own copy of @grpc/grpc-js (its status enum maps a code to its name).
const requireSdk = createRequire(new URL('../../../clients/typescript/package.json', import.meta.url));
const { status: Status } = requireSdk('@grpc/grpc-js');

// How long quit's flush waits for settles under way (the SDK's bounded flush).
const FLUSH_MS = 10_000;

/** The block's own failure (`end: failed` or `unknown`): not an error of the SDK's. */
class BlockFailed extends Error {
  constructor(message) {
    super(message);
    this.name = 'BlockFailed';
  }
}

/** A line that is no command the protocol allows where it came. */
class ProtocolError extends Error {
  constructor(message) {
    super(message);
    this.name = 'ProtocolError';
  }
}

function say(line) {
  process.stdout.write(JSON.stringify(line) + '\n');
}

function complain(message) {
  process.stderr.write(`typescript adapter: ${message}\n`);
}

// One reader for the whole process: hold's pause reads the next line mid-command.
const lines = createInterface({ input: process.stdin, crlfDelay: Infinity })[Symbol.asyncIterator]();

/** The next line of stdin as a command; null at its end. A line that is no JSON object
 * throws ProtocolError. */
async function nextCommand() {
  for (;;) {
    const { value, done } = await lines.next();
    if (done) return null;
    if (value.trim() === '') continue;
    let command;
    try {
      command = JSON.parse(value);
    } catch (error) {
      throw new ProtocolError(`not JSON: ${value} (${error.message})`);
    }
    if (typeof command !== 'object' || command === null || Array.isArray(command)) {
      throw new ProtocolError(`not a JSON object: ${value}`);
    }
    return command;
  }
}

function codeName(code) {
  return typeof code === 'number' && Status[code] !== undefined ? Status[code] : 'UNKNOWN';
}

/** An error of the SDK's (or the adapter's) as a failed answer: the gRPC status name, the
 * ErrorInfo reason or "", and the reservation id when one was admitted. */
function failure(error, reservationId = '') {
  // A hold found gone aborts h.signal with a HoldLostError, whose cause is the call's error.
  let cause = error;
  while (!(cause instanceof ClientError) && cause instanceof Error && cause.cause !== undefined) cause = cause.cause;
  let code = 'UNKNOWN';
  if (cause instanceof ClientError) code = codeName(cause.code);
  else if (error instanceof UnsafeJournalError) code = 'FAILED_PRECONDITION';
  else if (error instanceof ProtocolError) code = 'INVALID_ARGUMENT';
  let reason = '';
  if (error instanceof EarmarkClientError) reason = error.reason;
  else if (cause instanceof EarmarkClientError) reason = cause.reason;
  if (!(error instanceof EarmarkClientError)) complain(`${error?.stack ?? String(error)}`);
  const answer = { done: true, ok: false, code, reason, message: String(error?.message ?? error) };
  if (reservationId) answer.reservation_id = reservationId;
  return answer;
}

function refused(refusal) {
  return { done: true, ok: true, admitted: false, reason: refusal.reason };
}

/** One hold() as the command says. */
async function runHold(client, command) {
  const options = { returnRefusal: true };
  if (command.lease_ms !== undefined && command.lease_ms !== null) options.leaseSeconds = command.lease_ms / 1000;
  const end = command.end ?? 'succeeded';
  let held = null;
  let reservationId = '';
  try {
    const result = await hold(
      client,
      command.budget_id,
      command.amount,
      async (h) => {
        held = h;
        reservationId = h.reservationId;
        say({ event: 'reserved', reservation_id: reservationId });
        for (const amount of command.charges ?? []) await h.charge(amount);
        if (command.pause) {
          say({ event: 'paused', reservation_id: reservationId });
          const resume = await nextCommand();
          if (resume?.op !== 'resume') throw new ProtocolError(`want {"op": "resume"}, got ${JSON.stringify(resume)}`);
        }
        // Renewals go on meanwhile; a hold found gone aborts h.signal, which stops the work.
        if (command.work_ms) await sleep(command.work_ms, undefined, { signal: h.signal });
        if (command.used !== undefined && command.used !== null) h.used = command.used;
        if (end === 'unknown') {
          h.outcome = 'UNKNOWN';
          throw new BlockFailed("the work's outcome is unknown");
        }
        if (end === 'failed') throw new BlockFailed('the work failed');
        return undefined;
      },
      options,
    );
    if (held === null) {
      // fn never ran: returnRefusal handed the refusal back.
      if (result && result.admitted === false) return refused(result);
      return failure(new Error(`hold() answered without running the block: ${JSON.stringify(result)}`));
    }
  } catch (error) {
    if (error instanceof RefusedError) return refused(error.refusal);
    if (!(error instanceof BlockFailed)) {
      // An aborted sleep: say why the signal aborted (the HoldLostError), not AbortError.
      if (error?.name === 'AbortError' && held?.signal.aborted) return failure(held.signal.reason ?? error, reservationId);
      return failure(error, reservationId);
    }
    // The block's own failure: hold() settled it (or its settle failed, which hold() only
    // warns of, rethrowing the block's error: then there is no settle answer to report).
  }
  const answer = { done: true, ok: true, admitted: true, reservation_id: reservationId };
  if (held.settled !== null) answer.state = held.settled.state;
  return answer;
}

async function main() {
  let client = null;
  const closeClient = async () => {
    if (client === null) return;
    const closing = client;
    client = null;
    try {
      await closing.flush(FLUSH_MS);
    } catch (error) {
      complain(`flush: ${error?.stack ?? String(error)}`);
    }
    await closing.close();
  };
  for (;;) {
    let command;
    try {
      command = await nextCommand();
    } catch (error) {
      complain(error.message);
      say(failure(error));
      continue;
    }
    if (command === null) break;
    const op = command.op;
    if (op === 'open') {
      await closeClient();
      try {
        const options = { target: command.target };
        if (command.journal_dir) options.journalDir = command.journal_dir;
        if (command.token) options.token = command.token;
        client = new EarmarkClient(options);
        say({ done: true, ok: true });
      } catch (error) {
        say(failure(error));
      }
    } else if (op === 'hold' || op === 'recover') {
      if (client === null) {
        say({ done: true, ok: false, code: 'FAILED_PRECONDITION', reason: '', message: 'no client: send open first' });
      } else if (op === 'hold') {
        say(await runHold(client, command));
      } else {
        try {
          await client.recover();
          say({ done: true, ok: true });
        } catch (error) {
          say(failure(error));
        }
      }
    } else if (op === 'quit') {
      await closeClient();
      say({ done: true, ok: true });
      process.stdout.write('', () => process.exit(0));
      return;
    } else {
      say({ done: true, ok: false, code: 'UNIMPLEMENTED', reason: 'unknown op' });
    }
  }
  // End of input: close (flush included) and exit 0.
  await closeClient();
  process.stdout.write('', () => process.exit(0));
}

main().catch((error) => {
  complain(`fatal: ${error?.stack ?? String(error)}`);
  process.exit(1);
});
