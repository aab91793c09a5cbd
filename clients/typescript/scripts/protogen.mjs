// Generates src/gen/ from protos/earmark/v1/budget.proto with ts-proto (messages and
// @grpc/grpc-js clients), run by protoc. The generated files are checked in; the tests
// regenerate them into a temporary folder and fail when they differ (protos/ changed
// without `npm run generate`).
//
//   node scripts/protogen.mjs [--out DIR]
//
// protoc is the one grpcio-tools ships (`make venv` installs it into the repository's
// .venv); set PROTOC_PYTHON to another Python that has grpcio-tools.
import { spawnSync } from 'node:child_process';
import { mkdirSync, rmSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';

const here = path.dirname(fileURLToPath(import.meta.url));
const pkg = path.resolve(here, '..');
const root = path.resolve(pkg, '..', '..');
const { values } = parseArgs({ options: { out: { type: 'string' } } });
const out = path.resolve(values.out ?? path.join(pkg, 'src', 'gen'));
const python = process.env.PROTOC_PYTHON ?? path.join(root, '.venv', 'bin', 'python');
const plugin = path.join(pkg, 'node_modules', '.bin', 'protoc-gen-ts_proto');

// The options are part of the generated code's contract with src/: int64 as bigint (limits
// reach 10^18, past what a number holds exactly), Timestamps as Date, grpc-js clients, and
// relative imports ending in .js, which the ES module build needs (Node resolves an ES
// module's imports by their exact file names).
const options = [
  'outputServices=grpc-js',
  'forceLong=bigint',
  'esModuleInterop=true',
  'importSuffix=.js',
  'env=node',
  'useDate=true',
  'useOptionals=none',
  'exportCommonSymbols=false',
].join(',');

if (values.out === undefined) rmSync(out, { recursive: true, force: true });
mkdirSync(out, { recursive: true });
const result = spawnSync(
  python,
  [
    '-m', 'grpc_tools.protoc',
    `-I${path.join(root, 'protos')}`,
    `--plugin=protoc-gen-ts_proto=${plugin}`,
    `--ts_proto_out=${out}`,
    `--ts_proto_opt=${options}`,
    'earmark/v1/budget.proto',
  ],
  { cwd: root, stdio: 'inherit' },
);
if (result.error) throw result.error;
process.exit(result.status ?? 1);
