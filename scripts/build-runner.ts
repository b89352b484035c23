// Builds the reference runner as one file, dist/conductor-runner.mjs: plain
// Node 20+, everything it imports inside it, so that a build host needs that
// file and Node, not this repository and its node_modules (docs/runner.md,
// "Install"). The Dockerfile copies it into the runner image.
//   npm run build-runner                           into dist/
//   npm run build-runner -- --outfile /tmp/r.mjs   somewhere else
import { execFileSync } from 'node:child_process';
import { chmod, mkdir, readFile, writeFile } from 'node:fs/promises';
import { dirname, join, relative, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { build } from 'esbuild';
import { englishOnlyZod } from './bundle.ts';

const ROOT = fileURLToPath(new URL('..', import.meta.url));

/** Where `npm run build-runner` writes the bundle; the Dockerfile copies it from there. */
export const RUNNER_BUNDLE = 'dist/conductor-runner.mjs';
/** The entry: what `npm run runner` runs. */
const ENTRY = 'scripts/runner.ts';

// Replaced in the output once the bundle's inputs are known, since whether
// the build has uncommitted changes depends on which files went into it.
const VERSION_PLACEHOLDER = '@@CONDUCTOR_RUNNER_VERSION@@';

// Bundled ESM has no `require`; a CommonJS dependency that calls it for a
// Node built-in needs one. The shebang lets the file run as `./conductor-runner.mjs`.
const BANNER = [
  '#!/usr/bin/env node',
  "import { createRequire as __conductorCreateRequire } from 'node:module';",
  'const require = __conductorCreateRequire(import.meta.url);',
].join('\n');

export interface RunnerBuild {
  outfile: string;
  bytes: number;
  /** What `--version` prints after `conductor-runner `. */
  version: string;
}

function git(args: string[]): string | undefined {
  try {
    return execFileSync('git', args, { cwd: ROOT, stdio: ['ignore', 'pipe', 'ignore'] })
      .toString()
      .trim();
  } catch {
    return undefined; // No git, or not a checkout (a source tarball).
  }
}

/**
 * package.json's version, and the commit when this is a git checkout; marked
 * when a file that went into the bundle differs from that commit, so that a
 * runner built from work in progress never passes for the commit.
 */
async function versionOf(inputs: string[]): Promise<string> {
  const pkg = JSON.parse(await readFile(join(ROOT, 'package.json'), 'utf8')) as {
    version: string;
  };
  const commit = git(['rev-parse', '--short=12', 'HEAD']);
  if (!commit) return pkg.version;
  const ours = inputs.filter((p) => !p.includes('node_modules/'));
  const changed = git(['status', '--porcelain', '--', ...ours]);
  return `${pkg.version} (git ${commit}${changed ? ', with uncommitted changes' : ''})`;
}

/** Bundles the runner into `outfile` (default dist/conductor-runner.mjs), executable. */
export async function buildRunner(opts: { outfile?: string } = {}): Promise<RunnerBuild> {
  const outfile = resolve(opts.outfile ?? join(ROOT, RUNNER_BUNDLE));
  const result = await build({
    absWorkingDir: ROOT,
    entryPoints: [join(ROOT, ENTRY)],
    bundle: true,
    write: false,
    outfile,
    format: 'esm',
    platform: 'node',
    target: 'node20',
    mainFields: ['module', 'main'],
    // Readable: an operator's stack trace should name the runner's functions.
    minify: false,
    banner: { js: BANNER },
    define: { __CONDUCTOR_RUNNER_VERSION__: JSON.stringify(VERSION_PLACEHOLDER) },
    plugins: [englishOnlyZod],
    metafile: true,
    legalComments: 'none',
    logLevel: 'warning',
  });
  const inputs = Object.keys(result.metafile.inputs);
  // The runner must not read files beside it at run time; its inputs say
  // what it is made of, and only code may be among them.
  const data = inputs.filter((p) => !/\.(ts|js|mjs|cjs|json)$/.test(p));
  if (data.length) throw new Error(`the runner bundle would carry files: ${data.join(', ')}`);
  const version = await versionOf(inputs);
  const file = result.outputFiles.find((f) => resolve(f.path) === outfile);
  if (!file) throw new Error(`esbuild wrote no ${outfile}`);
  const text = file.text.replaceAll(VERSION_PLACEHOLDER, version.replaceAll('"', "'"));
  if (text === file.text) throw new Error('the version was not written into the runner bundle');
  await mkdir(dirname(outfile), { recursive: true });
  await writeFile(outfile, text);
  await chmod(outfile, 0o755);
  return { outfile, bytes: Buffer.byteLength(text), version };
}

if (process.argv[1] && resolve(process.argv[1]) === fileURLToPath(import.meta.url)) {
  const at = process.argv.indexOf('--outfile');
  const outfile = at >= 0 ? process.argv[at + 1] : undefined;
  const started = Date.now();
  const built = await buildRunner(outfile ? { outfile } : {});
  console.log(
    `${relative(process.cwd(), built.outfile) || built.outfile}: conductor-runner ${built.version}, ${built.bytes} bytes, in ${Date.now() - started} ms`,
  );
}
