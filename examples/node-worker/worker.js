// A Node.js worker that runs N jobs through Earmark with the TypeScript SDK
// (@earmark/client, from clients/typescript): Reserve, Charge before each step, Settle with
// what was used. The SDK brings the typed client generated from protos/, retries with the
// same idempotency keys, and errors whose class and reason come from the sidecar's
// google.rpc.ErrorInfo.
//
//   node worker.js --target 127.0.0.1:50051 --budget acme/tokens --jobs 20 \
//                  --estimate 10000 --actual 12000 --steps 4
//
// It prints one JSON line: admitted, refused, capped, charged (what it was charged in all),
// and errors: how many jobs failed, by the reason the sidecar gave.
'use strict';

const { parseArgs } = require('node:util');
const { EarmarkClient, EarmarkClientError } = require('@earmark/client');

const { values: args } = parseArgs({
  options: {
    target: { type: 'string', default: '127.0.0.1:50051' },
    budget: { type: 'string' },
    jobs: { type: 'string', default: '10' },
    estimate: { type: 'string', default: '10000' },
    actual: { type: 'string' },
    steps: { type: 'string', default: '4' },
  },
});
if (!args.budget) {
  console.error('worker.js: --budget is required');
  process.exit(2);
}
const jobs = Number(args.jobs);
const estimate = Number(args.estimate);
const actual = Number(args.actual ?? args.estimate);
const steps = Number(args.steps);

const earmark = new EarmarkClient({ target: args.target, timeoutMs: 10_000 });

function stepCosts(total, count) {
  const base = Math.floor(total / count);
  const extra = total % count;
  return Array.from({ length: count }, (_, i) => base + (i < extra ? 1 : 0));
}

async function job(summary) {
  const held = await earmark.reserve(args.budget, estimate, { labels: { worker: 'node' } });
  if (!held.admitted) {
    // A refusal is an answer, not an error: held.reason and held.message say why.
    summary.refused += 1;
    return;
  }
  summary.admitted += 1;
  let charged = 0;
  for (const cost of stepCosts(actual, steps)) {
    // Charge before the step runs; a capped charge means the hold is spent: stop.
    const step = await earmark.charge(held.reservationId, cost);
    charged = step.totalCharged;
    if (step.capped) {
      summary.capped += 1;
      break;
    }
  }
  const settled = await earmark.settle(held.reservationId, charged, 'SUCCEEDED');
  summary.charged += settled.charged;
}

// A job that fails fails only itself: the others go on, and the reason is counted.
async function guarded(summary) {
  try {
    await job(summary);
  } catch (error) {
    if (!(error instanceof EarmarkClientError) || !error.reason) throw error;
    summary.errors[error.reason] = (summary.errors[error.reason] ?? 0) + 1;
  }
}

async function main() {
  const summary = { admitted: 0, refused: 0, capped: 0, charged: 0, errors: {} };
  // Every job starts at once: they race on one budget.
  await Promise.all(Array.from({ length: jobs }, () => guarded(summary)));
  earmark.close();
  console.log(JSON.stringify(summary));
}

main().catch((error) => {
  console.error(`worker.js: ${error.message}`);
  process.exit(1);
});
