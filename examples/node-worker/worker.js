// A Node.js worker that runs N jobs through Earmark: Reserve, Charge before each step,
// Settle with what was used. It loads protos/ directly (no generated code), so it shows
// what any language needs: the .proto file and a gRPC library.
//
//   node worker.js --target 127.0.0.1:50051 --budget acme/tokens --jobs 20 \
//                  --estimate 10000 --actual 12000 --steps 4
//
// It prints one JSON line: admitted, refused, capped, charged (what it was charged in all),
// and errors: how many jobs failed, by the reason the sidecar gave (its google.rpc.ErrorInfo).
'use strict';

const crypto = require('node:crypto');
const path = require('node:path');
const { parseArgs } = require('node:util');
const grpc = require('@grpc/grpc-js');
const protoLoader = require('@grpc/proto-loader');
const protobuf = require('protobufjs');

const PROTO = path.join(__dirname, '..', '..', 'protos', 'earmark', 'v1', 'budget.proto');
const DEADLINE_MS = 10_000;

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

const definition = protoLoader.loadSync(PROTO, {
  keepCase: true, longs: Number, enums: String, defaults: true, oneofs: true,
});
const earmark = grpc.loadPackageDefinition(definition).earmark.v1;
const budget = new earmark.Budget(args.target, grpc.credentials.createInsecure());

// A failed call's status carries a google.rpc.Status in the grpc-status-details-bin trailer,
// holding a google.rpc.ErrorInfo whose reason is stable (the README lists them). These are
// the two messages (and Any) as the googleapis protos define them, field for field.
const rpc = protobuf.Root.fromJSON({
  nested: {
    Any: { fields: { type_url: { type: 'string', id: 1 }, value: { type: 'bytes', id: 2 } } },
    Status: {
      fields: {
        code: { type: 'int32', id: 1 },
        message: { type: 'string', id: 2 },
        details: { rule: 'repeated', type: 'Any', id: 3 },
      },
    },
    ErrorInfo: {
      fields: {
        reason: { type: 'string', id: 1 },
        domain: { type: 'string', id: 2 },
        metadata: { keyType: 'string', type: 'string', id: 3 },
      },
    },
  },
});
const Status = rpc.lookupType('Status');
const ErrorInfo = rpc.lookupType('ErrorInfo');

// The ErrorInfo of Earmark's domain in a failed call, or null.
function errorInfo(error) {
  const [details] = error.metadata ? error.metadata.get('grpc-status-details-bin') : [];
  if (!details) return null;
  for (const any of Status.decode(details).details) {
    if (any.type_url.endsWith('/google.rpc.ErrorInfo')) {
      const info = ErrorInfo.decode(any.value);
      if (info.domain === 'earmark') return info;
    }
  }
  return null;
}

// One promise per unary call, each with its own deadline.
function call(method, request) {
  return new Promise((resolve, reject) => {
    const deadline = new Date(Date.now() + DEADLINE_MS);
    budget[method](request, { deadline }, (error, reply) => (error ? reject(error) : resolve(reply)));
  });
}

function stepCosts(total, count) {
  const base = Math.floor(total / count);
  const extra = total % count;
  return Array.from({ length: count }, (_, i) => base + (i < extra ? 1 : 0));
}

async function job(summary) {
  const reply = await call('Reserve', {
    budget_id: args.budget,
    amount: estimate,
    idempotency_key: crypto.randomUUID(),
    labels: { worker: 'node' },
  });
  if (!reply.admitted) {
    summary.refused += 1;
    return;
  }
  summary.admitted += 1;
  let charged = 0;
  for (const [i, cost] of stepCosts(actual, steps).entries()) {
    // Charge before the step runs; a capped charge means the hold is spent: stop.
    const step = await call('Charge', {
      reservation_id: reply.reservation_id, amount: cost, idempotency_key: `step-${i}`,
    });
    charged = step.total_charged;
    if (step.capped) {
      summary.capped += 1;
      break;
    }
  }
  const settled = await call('Settle', {
    reservation_id: reply.reservation_id, used: charged, outcome: 'OUTCOME_SUCCEEDED',
  });
  summary.charged += settled.charged;
}

// A job that fails fails only itself: the others go on, and the reason is counted.
async function guarded(summary) {
  try {
    await job(summary);
  } catch (error) {
    const info = errorInfo(error);
    if (info === null) throw error;
    summary.errors[info.reason] = (summary.errors[info.reason] ?? 0) + 1;
  }
}

async function main() {
  const summary = { admitted: 0, refused: 0, capped: 0, charged: 0, errors: {} };
  // Every job starts at once: they race on one budget.
  await Promise.all(Array.from({ length: jobs }, () => guarded(summary)));
  budget.close();
  console.log(JSON.stringify(summary));
}

main().catch((error) => {
  console.error(`worker.js: ${error.message}`);
  process.exit(1);
});
