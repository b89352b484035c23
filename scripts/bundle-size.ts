// Builds every function's bundle (into a temporary directory) and prints its
// minified size, its budget, and what weighs most in it. Exits 1 when a
// bundle is over its budget; test/infra/bundle.test.ts holds the same line.
//   npm run bundle-size
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { bundleFunctions, byPackage, SIZE_BUDGET } from './bundle.ts';

const kb = (bytes: number) => `${(bytes / 1024).toFixed(0)} KB`;
const outdir = await mkdtemp(join(tmpdir(), 'conductor-bundle-size-'));
try {
  const bundles = await bundleFunctions({ outdir });
  let over = 0;
  console.log('function     size      budget   heaviest inputs');
  for (const b of bundles) {
    const budget = SIZE_BUDGET[b.name];
    if (b.bytes > budget) over++;
    const top = byPackage(b.inputs)
      .slice(0, 5)
      .map((p) => `${p.name} ${kb(p.bytes)}`)
      .join(', ');
    const flag = b.bytes > budget ? '  OVER' : '';
    console.log(
      `${b.name.padEnd(10)} ${kb(b.bytes).padStart(8)} ${kb(budget).padStart(9)}   ${top}${flag}`,
    );
  }
  if (over) {
    console.error(`${over} bundle(s) over budget`);
    process.exitCode = 1;
  }
} finally {
  await rm(outdir, { recursive: true, force: true });
}
