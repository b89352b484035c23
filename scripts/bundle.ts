// Builds one minified ESM bundle per deployed function, with its source map,
// into dist/functions/<name>/index.mjs: the directories infra/ hands to
// lambda.Code.fromAsset, so `npm run synth` needs esbuild and nothing else (no
// Docker). The migrate function's bundle carries the migrations' SQL inline
// (the numbered migrations and migrations/functions).
//   npm run bundle                      every function, into dist/functions
//   npm run bundle -- --outdir /tmp/x   somewhere else
import { createHash } from 'node:crypto';
import { mkdir, rm, writeFile } from 'node:fs/promises';
import { join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { build, type Metafile, type Plugin } from 'esbuild';
import { expectationOf, loadMigrationSet } from '../lib/db/migrate.ts';

const ROOT = fileURLToPath(new URL('..', import.meta.url));

/** Every deployed function and the file its handler lives in, relative to the repository. */
export const FUNCTIONS = {
  webhook: 'functions/webhook.ts',
  webhookQueue: 'functions/webhook-queue.ts',
  compile: 'functions/compile.ts',
  claim: 'functions/claim.ts',
  heartbeat: 'functions/heartbeat.ts',
  logs: 'functions/logs.ts',
  complete: 'functions/complete.ts',
  sweep: 'functions/sweep.ts',
  api: 'functions/api.ts',
  migrate: 'infra/migrate-handler.ts',
} as const;

export type BundledFunction = keyof typeof FUNCTIONS;
export const FUNCTION_NAMES = Object.keys(FUNCTIONS) as BundledFunction[];

export const DEFAULT_OUTDIR = join(ROOT, 'dist', 'functions');
const KB = 1024;
/**
 * The most each bundle may weigh, minified (issue #7): 500 KB, and 1.5 MB for
 * the functions that carry the Lambda client to dispatch compiles.
 */
export const SIZE_BUDGET: Record<BundledFunction, number> = {
  webhook: 1536 * KB,
  webhookQueue: 1536 * KB,
  api: 1536 * KB,
  sweep: 1536 * KB,
  // 600: the compile grew past 500 with this wave's pipeline features
  // (changes: with picomatch 24 KB, since replaced by lib/pipeline/pathglob.ts, inputs:, when:, concurrency:, the forge's
  // compare and branch calls); zod and yaml are still two thirds of it.
  compile: 600 * KB,
  claim: 500 * KB,
  heartbeat: 500 * KB,
  logs: 500 * KB,
  complete: 500 * KB,
  migrate: 500 * KB,
};

/** Beside the migrate bundle: the SHA-256 of the migrations it carries. */
export const MIGRATIONS_HASH_FILE = 'migrations.sha256';

export interface BundleResult {
  name: BundledFunction;
  /** The directory to deploy (index.mjs and index.mjs.map). */
  dir: string;
  /** Bytes of index.mjs, minified, without the source map. */
  bytes: number;
  /** Bytes each input contributed to index.mjs, largest first. */
  inputs: { path: string; bytes: number }[];
}

// Bundled ESM has no `require`; a CommonJS dependency (pg, parts of the AWS
// SDK) that calls it for a Node built-in needs one made from import.meta.url.
const REQUIRE_BANNER = [
  "import { createRequire as __conductorCreateRequire } from 'node:module';",
  'const require = __conductorCreateRequire(import.meta.url);',
].join('\n');

// zod's `z` namespace re-exports every locale (`z.locales`), about 260 KB
// minified that no function uses: the error messages are the English ones,
// which zod imports on its own. Resolve the locale index to English only.
const ZOD_LOCALES = /[\\/]zod[\\/]v4[\\/]locales[\\/]index\.js$/;
export const englishOnlyZod: Plugin = {
  name: 'zod-english-only',
  setup(b) {
    b.onResolve({ filter: /locales\/index\.js$/ }, async (args) => {
      if (args.pluginData === 'zod-english-only') return undefined;
      const real = await b.resolve(args.path, {
        kind: args.kind,
        resolveDir: args.resolveDir,
        importer: args.importer,
        pluginData: 'zod-english-only',
      });
      if (!ZOD_LOCALES.test(real.path)) return undefined;
      return { path: real.path, namespace: 'zod-english-only' };
    });
    b.onLoad({ filter: /.*/, namespace: 'zod-english-only' }, (args) => ({
      contents: `export { default as en } from ${JSON.stringify(join(args.path, '..', 'en.js'))};`,
      loader: 'js',
      resolveDir: join(args.path, '..'),
    }));
  },
};

/** Bundles the named functions (all by default) into `outdir/<name>/index.mjs`. */
export async function bundleFunctions(
  options: { outdir?: string; only?: readonly BundledFunction[] } = {},
): Promise<BundleResult[]> {
  const outdir = resolve(options.outdir ?? DEFAULT_OUTDIR);
  const names = options.only ?? FUNCTION_NAMES;
  // Read (and check) the migrations at build time, so the deployed migrate
  // function needs no loose .sql files and its code hash changes with them.
  const set = loadMigrationSet();
  const migrations = JSON.stringify(set);
  // The api function's /v1/ready compares the database with these checksums.
  const schema = JSON.stringify(expectationOf(set));
  return Promise.all(
    names.map(async (name) => {
      const dir = join(outdir, name);
      await rm(dir, { recursive: true, force: true });
      await mkdir(dir, { recursive: true });
      const outfile = join(dir, 'index.mjs');
      const result = await build({
        absWorkingDir: ROOT,
        entryPoints: [join(ROOT, FUNCTIONS[name])],
        outfile,
        bundle: true,
        minify: true,
        sourcemap: true,
        // Paths in the map relative to the repository, not this machine.
        sourceRoot: '',
        format: 'esm',
        platform: 'node',
        target: 'node22',
        mainFields: ['module', 'main'],
        banner: { js: REQUIRE_BANNER },
        define:
          name === 'migrate'
            ? { __CONDUCTOR_MIGRATIONS__: migrations }
            : name === 'api'
              ? { __CONDUCTOR_SCHEMA__: schema }
              : {},
        plugins: [englishOnlyZod],
        metafile: true,
        legalComments: 'none',
        logLevel: 'warning',
      });
      if (name === 'migrate') {
        // The stack passes this to the migrations' custom resource; the
        // function compares it with its own to recognise a rollback.
        const digest = createHash('sha256').update(migrations).digest('hex');
        await writeFile(join(dir, MIGRATIONS_HASH_FILE), `${digest}\n`);
      }
      const output = outputOf(result.metafile!, outfile);
      return {
        name,
        dir,
        bytes: output.bytes,
        inputs: Object.entries(output.inputs)
          .map(([path, { bytesInOutput }]) => ({ path, bytes: bytesInOutput }))
          .sort((a, b) => b.bytes - a.bytes),
      };
    }),
  );
}

function outputOf(metafile: Metafile, outfile: string): Metafile['outputs'][string] {
  const entry = Object.entries(metafile.outputs).find(
    ([path]) => resolve(ROOT, path) === resolve(outfile),
  );
  if (!entry) throw new Error(`esbuild wrote no ${outfile}`);
  return entry[1];
}

/** Groups a bundle's inputs by package (or by first-party folder), largest first. */
export function byPackage(inputs: BundleResult['inputs']): { name: string; bytes: number }[] {
  const totals = new Map<string, number>();
  for (const { path, bytes } of inputs) {
    const modules = path.split('node_modules/');
    const last = modules[modules.length - 1]!;
    let name: string;
    if (modules.length > 1) {
      const parts = last.split('/');
      name = parts[0]!.startsWith('@') ? `${parts[0]}/${parts[1]}` : parts[0]!;
    } else {
      name = path.split('/').slice(0, 2).join('/');
    }
    totals.set(name, (totals.get(name) ?? 0) + bytes);
  }
  return [...totals].map(([name, bytes]) => ({ name, bytes })).sort((a, b) => b.bytes - a.bytes);
}

if (process.argv[1] && resolve(process.argv[1]) === fileURLToPath(import.meta.url)) {
  const at = process.argv.indexOf('--outdir');
  const outdir = at >= 0 ? process.argv[at + 1] : undefined;
  const started = Date.now();
  const results = await bundleFunctions({ outdir });
  for (const r of results) console.log(`${r.name.padEnd(10)} ${r.bytes} bytes  ${r.dir}`);
  console.log(`bundled ${results.length} functions in ${Date.now() - started} ms`);
}
