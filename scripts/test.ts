// Runs every test file with node:test. Starts one embedded PostgreSQL server for
// the whole run (unless DATABASE_URL names an existing one) and hands its
// address to the test files, each of which makes its own database in it.
//   npm run test:unit                      every test/**/*.test.ts
//   npm run test:unit -- test/db           only files under these paths
import { spawn } from 'node:child_process';
import { existsSync, readdirSync, readFileSync, statSync } from 'node:fs';
import { rm } from 'node:fs/promises';
import { availableParallelism } from 'node:os';
import { join, relative } from 'node:path';
import { startEmbeddedPostgres, tempDirForCluster } from '../local/postgres.ts';

function findTests(path: string): string[] {
  if (statSync(path).isFile()) return path.endsWith('.test.ts') ? [path] : [];
  return readdirSync(path)
    .sort()
    .flatMap((entry) => (entry === 'node_modules' ? [] : findTests(join(path, entry))));
}

const roots = process.argv.slice(2);
const listed = (roots.length ? roots : ['test']).flatMap(findTests).map((f) => relative('.', f));
// CONDUCTOR_TEST_SKIP: comma-separated files left out of this run, one line
// saying which. CI's second database mode leaves out the files that do not
// depend on the database's version and ran in the first (.ci/run).
const skip = new Set(
  (process.env.CONDUCTOR_TEST_SKIP ?? '')
    .split(',')
    .map((f) => f.trim())
    .filter(Boolean),
);
const found = listed.filter((f) => !skip.has(f));
if (found.length < listed.length) {
  console.log(
    `# ${listed.length - found.length} test files left out by CONDUCTOR_TEST_SKIP: ${listed.filter((f) => skip.has(f)).join(', ')}`,
  );
}
// The browser tests (*.browser.test.ts) drive Debian's Chromium; without it
// they are left out of the run, and one line says so.
const chromium = process.env.CONDUCTOR_CHROMIUM ?? '/usr/bin/chromium';
const hasChromium = existsSync(chromium);
const withBrowser = hasChromium ? found : found.filter((f) => !f.endsWith('.browser.test.ts'));
if (withBrowser.length < found.length) {
  console.log(
    `# ${found.length - withBrowser.length} browser test files did not run: no Chromium at ${chromium} (install it: apt-get install chromium; or point CONDUCTOR_CHROMIUM at one)`,
  );
}
// The docker tests (*.docker.test.ts) run the docker executor on a real
// engine, the one DOCKER_HOST names (.ci/run starts one, with the images they
// use: .ci/docker/README.md); without DOCKER_HOST they are left out, and one
// line says so.
const files = process.env.DOCKER_HOST
  ? withBrowser
  : withBrowser.filter((f) => !f.endsWith('.docker.test.ts'));
if (files.length < withBrowser.length) {
  console.log(
    `# ${withBrowser.length - files.length} docker test files did not run: no DOCKER_HOST (start an engine and build the test images as .ci/run does: .ci/docker/README.md)`,
  );
}
if (files.length === 0) {
  console.error('no test files found');
  process.exit(1);
}

const started = Date.now();
let adminUrl = process.env.DATABASE_URL;
let stop = async (_failed: boolean) => {};
if (!adminUrl) {
  const parent = await tempDirForCluster('conductor-test-');
  const server = await startEmbeddedPostgres({
    dataDir: join(parent, 'pg'),
    ephemeral: true,
    say: (line) => console.log(`# ${line}`),
  });
  adminUrl = server.url();
  stop = async (failed: boolean) => {
    await server.stop();
    // A failed run keeps the cluster, with the failing files' databases in it
    // (as root it may live elsewhere than the parent: server.dataDir says where).
    if (failed) console.error(`# kept the test cluster in ${server.dataDir}`);
    else {
      await server.remove();
      await rm(parent, { recursive: true, force: true });
    }
  };
  console.log(`# embedded PostgreSQL on port ${server.port} (${Date.now() - started} ms to start)`);
} else {
  // Each test file creates a database of its own on DATABASE_URL's server;
  // nothing is written to the database the URL names. Their names start with
  // that database's name, at most 28 characters of it (CI names a fresh one
  // and drops every database under that prefix afterwards: .ci/run), or with
  // t_ for the maintenance database `postgres`.
  const database = decodeURIComponent(new URL(adminUrl).pathname.slice(1)) || 'postgres';
  const stem = database
    .replace(/[^a-z0-9]+/gi, '_')
    .toLowerCase()
    .slice(0, 28);
  process.env.CONDUCTOR_TEST_DB_PREFIX = database === 'postgres' ? 't_' : `${stem}_`;
  console.log(
    `# using DATABASE_URL's server; test databases are named ${process.env.CONDUCTOR_TEST_DB_PREFIX}<file>_<random>`,
  );
}

const concurrency = Number(process.env.CONDUCTOR_TEST_CONCURRENCY ?? availableParallelism());
// A test file still running after FILE_TIMEOUT_S fails, named, and is
// stopped (node --test applies --test-timeout to each file as a whole, hooks
// and top-level awaits included); RUN_TIMEOUT_S bounds the whole run, naming
// the files still running. A stuck run then ends in minutes with the file to
// look at, instead of holding CI until its own limit with nothing said.
const FILE_TIMEOUT_S = Number(process.env.CONDUCTOR_TEST_FILE_TIMEOUT_S ?? 300);
const RUN_TIMEOUT_S = Number(process.env.CONDUCTOR_TEST_RUN_TIMEOUT_S ?? 1500);
const child = spawn(
  process.execPath,
  [
    '--import',
    'tsx',
    '--test',
    `--test-concurrency=${concurrency}`,
    `--test-timeout=${FILE_TIMEOUT_S * 1000}`,
    // Not --test-force-exit: on Node 20 it ended a file mid-suite, with its
    // remaining tests never run and the file counted as passed (seen with
    // both cores busy). A file kept alive by a leaked handle meets its limit.
    ...files,
  ],
  {
    stdio: 'inherit',
    env: { ...process.env, CONDUCTOR_TEST_ADMIN_URL: adminUrl },
    // Its own process group, so the run's limit stops the test files with it.
    detached: true,
  },
);
const stopGroup = (signal: NodeJS.Signals) => {
  try {
    if (child.pid) process.kill(-child.pid, signal);
  } catch {
    // already gone
  }
};
// Ctrl-C and CI's TERM reach the test files, as they would without the group.
for (const signal of ['SIGINT', 'SIGTERM', 'SIGHUP'] as const) {
  process.on(signal, () => stopGroup(signal));
}
/** The test files still running: the runner's child processes, read from /proc (Linux). */
function runningFiles(parent: number): string[] {
  const files: string[] = [];
  try {
    for (const pid of readdirSync('/proc').filter((e) => /^\d+$/.test(e))) {
      try {
        const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
        const ppid = Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[1]);
        if (ppid !== parent) continue;
        const args = readFileSync(`/proc/${pid}/cmdline`, 'utf8').split('\0');
        // A test file's process names one file (the runner itself names them all).
        const named = args.filter((a) => a.endsWith('.test.ts'));
        if (named.length === 1) files.push(relative('.', named[0]!));
      } catch {
        // gone meanwhile
      }
    }
  } catch {
    // no /proc here
  }
  return files;
}
// Each file's time, as the files running are seen once a second (Linux):
// the slowest are named at the end, so a run that grows long says where.
// Counted in sightings, not from first to last: a file is its seconds seen.
const seen = new Map<string, number>();
const watch = setInterval(() => {
  for (const file of child.pid ? runningFiles(child.pid) : []) {
    seen.set(file, (seen.get(file) ?? 0) + 1);
  }
}, 1000);
watch.unref();
let overran = false;
const limit = setTimeout(() => {
  overran = true;
  const hung = child.pid ? runningFiles(child.pid) : [];
  console.error(
    `# the run went past CONDUCTOR_TEST_RUN_TIMEOUT_S=${RUN_TIMEOUT_S} s: stopping it; still running: ${hung.join(', ') || '(could not tell)'}`,
  );
  stopGroup('SIGTERM');
  setTimeout(() => stopGroup('SIGKILL'), 10_000).unref();
}, RUN_TIMEOUT_S * 1000);
const code: number = await new Promise((done) => {
  child.on('exit', (c, signal) => done(c ?? (signal ? 1 : 0)));
});
clearTimeout(limit);
clearInterval(watch);
if (overran) stopGroup('SIGKILL');
const slowest = [...seen]
  .map(([file, s]) => ({ file, s }))
  .sort((a, b) => b.s - a.s)
  .slice(0, 12);
if (slowest.length > 1) {
  console.log(
    `# slowest files (seconds running, to about 1 s): ${slowest.map((f) => `${f.file} ${f.s.toFixed(0)}`).join(', ')}`,
  );
}
const runCode = overran ? 1 : code;
await stop(runCode !== 0);
console.log(`# test run took ${((Date.now() - started) / 1000).toFixed(1)} s`);
process.exit(runCode);
