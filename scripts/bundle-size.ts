// Builds every function's bundle (into a temporary directory) and prints, for
// each, what a cold start loads (index.mjs and its static chunks) against its
// size budget, what it loads later (chunks behind `import()`), its cold
// import on this machine (CPU and wall time, medians of 7 fresh nodes; the
// CPU time against its budget), and what weighs most. Exits 1 when a
// function passes a budget; test/infra/bundle.test.ts holds the same lines.
//   npm run bundle-size
//   npm run bundle-size -- --sdk runtime   the AWS SDK left to Lambda's runtime
//     (measured from a directory in this repository, whose node_modules
//     stands in for the runtime's)
import { mkdir, mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import {
  bundleFunctions,
  byPackage,
  COLD_IMPORT_BUDGET_MS,
  coldImport,
  SIZE_BUDGET,
} from './bundle.ts';

const kb = (bytes: number) => `${(bytes / 1024).toFixed(0)} KB`;
const sdk = process.argv.includes('--sdk') ? process.argv[process.argv.indexOf('--sdk') + 1] : '';
if (sdk && sdk !== 'runtime' && sdk !== 'bundled') throw new Error('--sdk is runtime or bundled');
// The runtime's SDK is found by walking up from the bundle to a node_modules.
const parent = sdk === 'runtime' ? fileURLToPath(new URL('../dist/', import.meta.url)) : tmpdir();
await mkdir(parent, { recursive: true });
const outdir = await mkdtemp(join(parent, 'conductor-bundle-size-'));
try {
  const bundles = await bundleFunctions({ outdir, sdk: sdk === 'runtime' ? 'runtime' : 'bundled' });
  let over = 0;
  console.log(
    'function       cold size   budget   lazy     import cpu  budget  (wall)   heaviest at cold start',
  );
  for (const b of bundles) {
    const budget = SIZE_BUDGET[b.name];
    const timeBudget = COLD_IMPORT_BUDGET_MS[b.name];
    const { cpuMs, wallMs } = coldImport(b.dir);
    const flags = [
      ...(b.bytes > budget ? ['OVER SIZE'] : []),
      ...(cpuMs > timeBudget ? ['OVER TIME'] : []),
    ];
    over += flags.length;
    const top = byPackage(b.coldInputs)
      .slice(0, 5)
      .map((p) => `${p.name} ${kb(p.bytes)}`)
      .join(', ');
    console.log(
      [
        b.name.padEnd(14),
        kb(b.bytes).padStart(9),
        kb(budget).padStart(8),
        kb(b.lazyBytes).padStart(7),
        `${cpuMs.toFixed(0)} ms`.padStart(12),
        `${timeBudget} ms`.padStart(7),
        `(${wallMs.toFixed(0)} ms)`.padStart(9),
        `  ${top}${flags.length ? `  ${flags.join(', ')}` : ''}`,
      ].join(' '),
    );
  }
  if (over) {
    console.error(`${over} budget(s) passed`);
    process.exitCode = 1;
  }
} finally {
  await rm(outdir, { recursive: true, force: true });
}
