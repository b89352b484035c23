// Builds one minified ESM bundle per deployed function, with its source maps,
// into dist/functions/<name>/index.mjs (and chunks/, the modules a function
// loads only when a request needs them): the directories infra/ hands to
// lambda.Code.fromAsset, so `npm run synth` needs esbuild and nothing else (no
// Docker). The migrate function's bundle carries the migrations' SQL inline
// (the numbered migrations and migrations/functions).
//   npm run bundle                      every function, into dist/functions
//   npm run bundle -- --outdir /tmp/x   somewhere else
import { spawnSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import { mkdir, readFile, rm, writeFile } from 'node:fs/promises';
import { join, relative, resolve } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
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
  channel: 'functions/channel.ts',
  migrate: 'infra/migrate-handler.ts',
} as const;

export type BundledFunction = keyof typeof FUNCTIONS;
export const FUNCTION_NAMES = Object.keys(FUNCTIONS) as BundledFunction[];

export const DEFAULT_OUTDIR = join(ROOT, 'dist', 'functions');
const KB = 1024;
/**
 * The most each function may load at a cold start, minified (issue #56): its
 * index.mjs and the chunks that imports statically; a chunk it imports with
 * `import()` is loaded by the request that needs it, and counted apart.
 */
export const SIZE_BUDGET: Record<BundledFunction, number> = Object.fromEntries(
  FUNCTION_NAMES.map((name) => [name, 500 * KB]),
) as Record<BundledFunction, number>;

/**
 * The most each function's cold import may take on the machine that builds
 * it, in milliseconds of CPU (see coldImport): issue #56's 150 ms for every
 * function. Measured on a quiet 2-core machine, the functions take 55 to
 * 105 ms (docs/architecture.md, "Bundles"); the CPU time of an import grows
 * with the load of a shared machine, which is why `.ci/run` measures before
 * the suite, not beside or after it.
 */
export const COLD_IMPORT_BUDGET_MS: Record<BundledFunction, number> = Object.fromEntries(
  FUNCTION_NAMES.map((name) => [name, 150]),
) as Record<BundledFunction, number>;

/**
 * The AWS SDK v3 that the nodejs22.x runtime ships (in
 * /var/runtime/node_modules). Bundled by default: issue #56 measured leaving
 * it to the runtime (`npm run bundle-size -- --sdk runtime`) and kept it
 * bundled (docs/architecture.md, "Bundles"). Either way every import of it
 * is an `import()` at the call that needs it, so no cold start loads it.
 */
export const RUNTIME_PROVIDED = /^@aws-sdk\//;

// Left to the runtime, and free of side effects: a module that imports the
// SDK but is itself unused is dropped with its import, not kept for it.
const runtimeSdk: Plugin = {
  name: 'runtime-sdk',
  setup(b) {
    b.onResolve({ filter: RUNTIME_PROVIDED }, (args) => ({
      path: args.path,
      external: true,
      sideEffects: false,
    }));
  },
};

/** Beside the migrate bundle: the SHA-256 of the migrations it carries. */
export const MIGRATIONS_HASH_FILE = 'migrations.sha256';

export interface BundleResult {
  name: BundledFunction;
  /** The directory to deploy (index.mjs, chunks/, and their source maps). */
  dir: string;
  /** Bytes a cold start loads: index.mjs and the chunks it imports statically, minified, without source maps. */
  bytes: number;
  /** Bytes of the chunks loaded only by `import()`, when a request needs them. */
  lazyBytes: number;
  /** Bytes each input contributed to the whole function (every file), largest first. */
  inputs: { path: string; bytes: number }[];
  /** Bytes each input contributed to what a cold start loads, largest first. */
  coldInputs: { path: string; bytes: number }[];
  /** Packages left to the runtime (RUNTIME_PROVIDED) the function imports, and how. */
  external: { path: string; kind: 'static' | 'dynamic' }[];
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

// pg decides at import whether it runs in a Cloudflare Worker: where
// `navigator` is missing (Node 20; Node 21 and later have it), it constructs a
// `Response`, which loads Node's fetch (undici) and with it http2, tls,
// worker_threads and perf_hooks: 30 to 40 ms of CPU of every cold start on
// Node 20 (issue #56), for a bundle that only ever runs on Node. The check is
// answered "no" at build time; a pg whose stream.js no longer reads this way
// fails the build, so an upgrade is looked at rather than silently unpatched.
const PG_STREAM = /[\\/]pg[\\/]lib[\\/]stream\.js$/;
const PG_CLOUDFLARE_CHECK = 'if (isCloudflareRuntime()) {';
export const nodeOnlyPg: Plugin = {
  name: 'node-only-pg',
  setup(b) {
    b.onLoad({ filter: PG_STREAM }, async (args) => {
      const source = await readFile(args.path, 'utf8');
      if (!source.includes(PG_CLOUDFLARE_CHECK)) {
        throw new Error(
          `${args.path} no longer holds "${PG_CLOUDFLARE_CHECK}" (scripts/bundle.ts, nodeOnlyPg)`,
        );
      }
      return { contents: source.replace(PG_CLOUDFLARE_CHECK, 'if (false) {'), loader: 'js' };
    });
  },
};

/** Bundles the named functions (all by default) into `outdir/<name>/index.mjs`. */
export async function bundleFunctions(
  options: {
    outdir?: string;
    only?: readonly BundledFunction[];
    /** Where the AWS SDK comes from: bundled (the default), or the runtime's. */
    sdk?: 'bundled' | 'runtime';
  } = {},
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
        entryPoints: { index: join(ROOT, FUNCTIONS[name]) },
        outdir: dir,
        // A module imported with `import()` goes into a chunk of its own,
        // loaded when a request first needs it, not at the cold start.
        splitting: true,
        chunkNames: 'chunks/[name]-[hash]',
        outExtension: { '.js': '.mjs' },
        bundle: true,
        minify: true,
        treeShaking: true,
        sourcemap: true,
        sourcesContent: false,
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
        plugins:
          options.sdk === 'runtime'
            ? [englishOnlyZod, nodeOnlyPg, runtimeSdk]
            : [englishOnlyZod, nodeOnlyPg],
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
      return { name, dir, ...measureOutputs(result.metafile!, outfile) };
    }),
  );
}

type Inputs = BundleResult['inputs'];

/** What a function's files weigh: the cold start's (index.mjs and its static imports) and the rest. */
function measureOutputs(metafile: Metafile, outfile: string): Omit<BundleResult, 'name' | 'dir'> {
  const outputs = new Map(
    Object.entries(metafile.outputs)
      .filter(([path]) => path.endsWith('.mjs'))
      .map(([path, output]) => [resolve(ROOT, path), output]),
  );
  const entry = resolve(outfile);
  if (!outputs.has(entry)) throw new Error(`esbuild wrote no ${outfile}`);
  const cold = new Set<string>();
  const visit = (path: string) => {
    if (cold.has(path)) return;
    cold.add(path);
    for (const i of outputs.get(path)!.imports) {
      if (i.kind === 'import-statement' && !i.external) visit(resolve(ROOT, i.path));
    }
  };
  visit(entry);
  const sum = (paths: string[]): Inputs => {
    const totals = new Map<string, number>();
    for (const p of paths) {
      for (const [input, { bytesInOutput }] of Object.entries(outputs.get(p)!.inputs)) {
        totals.set(input, (totals.get(input) ?? 0) + bytesInOutput);
      }
    }
    return [...totals]
      .map(([path, bytes]) => ({ path, bytes }))
      .filter((i) => i.bytes > 0)
      .sort((a, b) => b.bytes - a.bytes);
  };
  const external = new Map<string, 'static' | 'dynamic'>();
  for (const [path, output] of outputs) {
    for (const i of output.imports) {
      if (!i.external || !RUNTIME_PROVIDED.test(i.path)) continue;
      const kind = i.kind === 'import-statement' && cold.has(path) ? 'static' : 'dynamic';
      if (external.get(i.path) !== 'static') external.set(i.path, kind);
    }
  }
  let bytes = 0;
  let lazyBytes = 0;
  for (const [path, output] of outputs) {
    if (cold.has(path)) bytes += output.bytes;
    else lazyBytes += output.bytes;
  }
  return {
    bytes,
    lazyBytes,
    inputs: sum([...outputs.keys()]),
    coldInputs: sum([...cold]),
    external: [...external]
      .map(([path, kind]) => ({ path, kind }))
      .sort((a, b) => a.path.localeCompare(b.path)),
  };
}

const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!;

// Run in a fresh node: the time of the import alone, from before it to after
// it, so node's own start is left out.
const IMPORT_PROBE = [
  'const c = process.cpuUsage(); const t = performance.now();',
  'await import(process.argv[1]);',
  'const wall = performance.now() - t; const u = process.cpuUsage(c);',
  'process.stdout.write(JSON.stringify({ wall, cpu: (u.user + u.system) / 1000 }));',
].join(' ');

/** How a cold import is taken: which node, with which flags. */
export interface ImportOptions {
  /** Another node to import with (Lambda's is Node 22: `npm run bundle-size -- --node PATH`). */
  node?: string;
  /** Flags for that node: `--enable-source-maps`, as the stack sets NODE_OPTIONS. */
  flags?: string[];
}

/**
 * One cold import of a function: a fresh node imports its index.mjs (what
 * Lambda's runtime does before the first event); the CPU time and the wall
 * time the import took, node's own start left out.
 */
export function importOnce(
  dir: string,
  options: ImportOptions = {},
): { cpu: number; wall: number } {
  const url = pathToFileURL(join(dir, 'index.mjs')).href;
  const args = [...(options.flags ?? []), '--input-type=module', '-e', IMPORT_PROBE, url];
  const child = spawnSync(options.node ?? process.execPath, args, {
    encoding: 'utf8',
    // None of this process's settings (NODE_OPTIONS, tsx's loader).
    env: { PATH: process.env.PATH ?? '' },
  });
  if (child.status !== 0) {
    throw new Error(`importing ${relative(ROOT, dir)}/index.mjs failed: ${child.stderr}`);
  }
  return JSON.parse(child.stdout) as { cpu: number; wall: number };
}

/**
 * The cold imports of several functions, `runs` each, taken in turns (one
 * of each, then the next round) so that a slow spell of a shared machine
 * falls on every function alike rather than on the one measured during it;
 * per directory, the medians of the CPU time and of the wall time. The
 * budget holds the CPU time: on a machine other work shares, the wall time
 * also counts the waits for a core, the CPU time hardly.
 */
export function coldImports(
  dirs: readonly string[],
  options: ImportOptions & { runs?: number } = {},
): { cpuMs: number; wallMs: number }[] {
  const runs = options.runs ?? 7;
  const taken = dirs.map(() => ({ cpu: [] as number[], wall: [] as number[] }));
  for (let i = 0; i < runs; i++) {
    dirs.forEach((dir, k) => {
      const m = importOnce(dir, options);
      taken[k]!.cpu.push(m.cpu);
      taken[k]!.wall.push(m.wall);
    });
  }
  return taken.map((t) => ({ cpuMs: median(t.cpu), wallMs: median(t.wall) }));
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
  for (const r of results) {
    console.log(`${r.name.padEnd(12)} ${r.bytes} bytes (+${r.lazyBytes} lazy)  ${r.dir}`);
  }
  console.log(`bundled ${results.length} functions in ${Date.now() - started} ms`);
}
