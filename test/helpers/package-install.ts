// The installable package as a user gets it: `npm pack` of this checkout,
// installed into a fresh prefix (`npm install -g --prefix DIR ./pkg.tgz`, its
// dependencies from the registry), with nothing of this checkout reachable
// from its commands: no tsx, no dev dependency, no source file.
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { createHash } from 'node:crypto';
import { readdirSync, readFileSync } from 'node:fs';
import { mkdir, mkdtemp, rm, stat } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { after } from 'node:test';
import { promisify } from 'node:util';
import { ROOT } from './server-process.ts';

const run = promisify(execFile);

const LOCK_WAIT_MS = 10 * 60_000;

/**
 * Runs `work` holding this checkout's pack lock: two `npm pack`s of one
 * checkout at once break each other (its build rewrites dist/bin/), and the
 * run's test files are processes of their own. A directory made with mkdir
 * is the lock; one older than the wait was left by a killed run.
 */
async function withPackLock<T>(work: () => Promise<T>): Promise<T> {
  const key = createHash('sha256').update(ROOT).digest('hex').slice(0, 16);
  const lock = join(tmpdir(), `conductor-pack-${key}.lock`);
  const deadline = Date.now() + LOCK_WAIT_MS;
  for (;;) {
    try {
      await mkdir(lock);
      break;
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== 'EEXIST') throw err;
      const made = await stat(lock).then(
        (s) => s.mtimeMs,
        () => Date.now(),
      );
      if (Date.now() - made > LOCK_WAIT_MS) await rm(lock, { recursive: true, force: true });
      else if (Date.now() > deadline) throw new Error(`waited too long for ${lock}`);
      else await new Promise((done) => setTimeout(done, 500));
    }
  }
  try {
    return await work();
  } finally {
    await rm(lock, { recursive: true, force: true });
  }
}

export interface InstalledPackage {
  /** The test's temporary directory (the tarball, the prefix, `elsewhere`). */
  dir: string;
  prefix: string;
  /** The prefix's bin: `conductor`, `conductor-runner`. */
  bin: string;
  /** Where the package's files are: dist/, migrations/, its node_modules. */
  installed: string;
  /** A directory outside the checkout and the prefix to run commands from. */
  elsewhere: string;
  /** What `npm pack` said it packed, by path. */
  shipped: Set<string>;
  /** An environment for its commands: node and the prefix's bin on PATH, no npm_config_*. */
  env: NodeJS.ProcessEnv;
}

/** Packs this checkout and installs it into a fresh prefix, removed after the file's tests. */
export async function installPackage(): Promise<InstalledPackage> {
  const pkg = JSON.parse(readFileSync(join(ROOT, 'package.json'), 'utf8'));
  const dir = await mkdtemp(join(tmpdir(), 'conductor-package-'));
  after(() => rm(dir, { recursive: true, force: true }));
  const prefix = join(dir, 'prefix');
  const elsewhere = join(dir, 'elsewhere');
  // npm's own settings from the test runner's environment (npm_config_*) must
  // not steer the install; PATH has node and the prefix's bin, nothing else of ours.
  const env: NodeJS.ProcessEnv = {
    ...Object.fromEntries(Object.entries(process.env).filter(([k]) => !/^npm_/i.test(k))),
    PATH: `${join(prefix, 'bin')}:${dirname(process.execPath)}:/usr/bin:/bin`,
    NODE_OPTIONS: '',
  };
  const packed = await withPackLock(() =>
    run('npm', ['pack', '--json', '--pack-destination', dir], {
      cwd: ROOT,
      env,
      timeout: 300_000,
      maxBuffer: 64 * 1024 * 1024,
    }),
  );
  const [{ filename, files }] = JSON.parse(packed.stdout.slice(packed.stdout.indexOf('[')));
  const shipped = new Set((files as { path: string }[]).map((f) => f.path));
  // What the contract says the package ships: migrations/ as its SQL files.
  for (const sql of readdirSync(join(ROOT, 'migrations'), { recursive: true })) {
    if (String(sql).endsWith('.sql')) assert.ok(shipped.has(`migrations/${sql}`), `${sql} ships`);
  }
  await run(
    'npm',
    ['install', '-g', '--prefix', prefix, '--no-audit', '--no-fund', join(dir, filename)],
    {
      cwd: dir,
      env,
      timeout: 300_000,
    },
  );
  await mkdir(elsewhere, { recursive: true });
  return {
    dir,
    prefix,
    bin: join(prefix, 'bin'),
    installed: join(prefix, 'lib', 'node_modules', ...pkg.name.split('/')),
    elsewhere,
    shipped,
    env,
  };
}
