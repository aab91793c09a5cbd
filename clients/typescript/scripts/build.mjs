// Builds the package twice from src/ with tsc, into dist/cjs (CommonJS, for `require`) and
// dist/esm (ES modules, for `import`), each with the package.json that tells Node which
// it is; package.json's "exports" sends each kind of import to its own. dist/ is emptied
// first, so that the packed tarball holds no file of an older layout.
//
//   node scripts/build.mjs
import { spawnSync } from 'node:child_process';
import { mkdirSync, rmSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const pkg = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');
const tsc = path.join(pkg, 'node_modules', 'typescript', 'bin', 'tsc');
const builds = [
  ['tsconfig.json', 'cjs', 'commonjs'],
  ['tsconfig.esm.json', 'esm', 'module'],
];

rmSync(path.join(pkg, 'dist'), { recursive: true, force: true });
for (const [config, folder, type] of builds) {
  const result = spawnSync(process.execPath, [tsc, '-p', config], { cwd: pkg, stdio: 'inherit' });
  if (result.error) throw result.error;
  if (result.status !== 0) process.exit(result.status ?? 1);
  mkdirSync(path.join(pkg, 'dist', folder), { recursive: true });
  writeFileSync(path.join(pkg, 'dist', folder, 'package.json'), `${JSON.stringify({ type }, null, 2)}\n`);
}
