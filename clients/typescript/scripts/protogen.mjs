// Generates src/gen/ from protos/ (`npm run generate`): the repository's one generation,
// tools/protogen.py (`make generate`), which runs `buf generate` with buf.gen.yaml for every
// language at once (ts-proto 2.18.0 and its options are there). The generated files are
// checked in; the tests (tests/test_generated.py) regenerate them into a temporary folder and
// fail when they differ.
//
//   node scripts/protogen.mjs [--out DIR]
//
// Without --out it regenerates the checkout, every language; with --out it writes only the
// TypeScript files, into DIR (the others are generated into a temporary folder and dropped).
// It needs what `make generate` needs: .venv (`make venv`), buf (`make buf-tools`), this
// package's node_modules (`make typescript`) and the Go and Java generators .ci/run installs.
import { spawnSync } from 'node:child_process';
import { cpSync, mkdirSync, mkdtempSync, rmSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';

const here = path.dirname(fileURLToPath(import.meta.url));
const pkg = path.resolve(here, '..');
const root = path.resolve(pkg, '..', '..');
const { values } = parseArgs({ options: { out: { type: 'string' } } });
const python = path.join(root, '.venv', 'bin', 'python');
const protogen = path.join(root, 'tools', 'protogen.py');

function run(args) {
  const result = spawnSync(python, [protogen, ...args], { cwd: root, stdio: 'inherit' });
  if (result.error) throw result.error;
  if (result.status !== 0) process.exit(result.status ?? 1);
}

if (values.out === undefined) {
  run([]);
} else {
  const out = path.resolve(values.out);
  const all = mkdtempSync(path.join(os.tmpdir(), 'earmark-protogen-'));
  try {
    run(['--out', all]);
    mkdirSync(out, { recursive: true });
    cpSync(path.join(all, path.relative(root, path.join(pkg, 'src', 'gen'))), out, {
      recursive: true,
    });
  } finally {
    rmSync(all, { recursive: true, force: true });
  }
}
