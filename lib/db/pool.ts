import pg from 'pg';
import { sqlState } from './sqlstate.ts';

export interface PoolConfig {
  /** A postgres:// connection string. */
  url: string;
  /** Connections per pool; on Lambda keep this small, one pool per container. */
  max?: number;
  /** How long a connection may sit idle in the pool before it is closed. */
  idleTimeoutMs?: number;
  /** How long to wait for a connection before failing the request. */
  connectTimeoutMs?: number;
  applicationName?: string;
  /**
   * The server ends a session idle this long (`idle_session_timeout`), so a
   * frozen Lambda container's connection does not keep the database awake;
   * the pool never hands out a client that sat idle nearly that long. Default
   * 60 s; 0 leaves the server's setting.
   */
  idleSessionTimeoutMs?: number;
  /** Connecting again after a connection error, on a fresh connection; default 1. */
  connectRetries?: number;
  /** A password made for each new connection (an IAM token), instead of the URL's. */
  password?: () => Promise<string>;
}

/**
 * The URL as separate settings, for a password function: pg lets a
 * connection string's (empty) password win over one given beside it.
 */
function settingsOf(url: string, password: () => Promise<string>): pg.PoolConfig {
  const u = new URL(url);
  const sslmode = u.searchParams.get('sslmode');
  return {
    host: decodeURIComponent(u.hostname),
    port: Number(u.port || 5432),
    user: decodeURIComponent(u.username),
    database: decodeURIComponent(u.pathname.slice(1)),
    password,
    ssl:
      sslmode === 'disable' || sslmode === null
        ? false
        : sslmode === 'no-verify'
          ? { rejectUnauthorized: false }
          : { rejectUnauthorized: true },
  };
}

export type Pool = pg.Pool;
/** Anything that runs a query: a pool, or the client of an open transaction. */
export type Queryable = Pick<pg.ClientBase, 'query'>;

// Counts, sizes and offsets come back as int8; every one of them stays far below
// 2^53, so numbers are safer for callers than the strings pg returns by default.
const INT8_OID = 20;
const types = {
  getTypeParser(oid: number, format?: 'text' | 'binary') {
    if (oid === INT8_OID && format !== 'binary') return (v: string) => Number.parseInt(v, 10);
    return pg.types.getTypeParser(oid, format);
  },
} as pg.CustomTypesConfig;

/**
 * The isolation of every transaction that does not name its own: the hot
 * path's single statements (claim, success, heartbeat, worker check) commit on
 * their own, and must run at REPEATABLE READ whatever the server, the database
 * or the role sets as `default_transaction_isolation`. A startup option is a
 * client setting (source "client"), which overrides postgresql.conf, ALTER
 * DATABASE and ALTER ROLE, and it costs no round trip and no session SET
 * (which would pin the connection behind RDS Proxy).
 */
export const SESSION_OPTIONS = '-c default_transaction_isolation=repeatable\\ read';

const DEFAULT_IDLE_SESSION_TIMEOUT_MS = 60_000;
// A pooled client idle within this much of the server's idle_session_timeout
// may be ended by the server while our first query is on its way: drop it.
const IDLE_SESSION_MARGIN_MS = 5_000;

/** A connection pool built from configuration; errors on idle connections are logged, never fatal. */
export function createPool(config: PoolConfig, onIdleError?: (err: Error) => void): Pool {
  const idleSessionMs = config.idleSessionTimeoutMs ?? DEFAULT_IDLE_SESSION_TIMEOUT_MS;
  const pool = new pg.Pool({
    ...(config.password
      ? settingsOf(config.url, config.password)
      : { connectionString: config.url }),
    max: config.max ?? 10,
    idleTimeoutMillis: config.idleTimeoutMs ?? 30_000,
    // Long enough for Aurora Serverless to resume from a pause (about 15 s).
    connectionTimeoutMillis: config.connectTimeoutMs ?? 20_000,
    application_name: config.applicationName ?? 'conductor',
    // idle_session_timeout is a client setting like the isolation above (no
    // round trip, no session SET); PostgreSQL 14 and newer have it.
    options:
      idleSessionMs > 0
        ? `${SESSION_OPTIONS} -c idle_session_timeout=${Math.trunc(idleSessionMs)}`
        : SESSION_OPTIONS,
    types,
  });
  // An idle client whose server went away emits 'error' on the pool; without a
  // listener Node would crash the process.
  pool.on('error', (err) => onIdleError?.(err));
  guardCheckouts(pool, {
    staleAfterMs: idleSessionMs > 0 ? idleSessionMs - IDLE_SESSION_MARGIN_MS : undefined,
    connectRetries: config.connectRetries ?? 1,
  });
  return pool;
}

/**
 * Wraps the pool's checkout (which `pool.query` uses too) so that a client is
 * never handed out when the server may already have ended its session, and a
 * connect that failed on the connection is tried once more. Only these two are
 * retried, because nothing of the caller's has reached the server yet: a
 * statement that failed on a broken connection may or may not have run, and
 * is never sent again here. A pool's idle timer does not run while a Lambda
 * container is frozen, so on thaw a client idle for minutes would otherwise be
 * handed out before the timer (or the server's goodbye) removes it.
 */
function guardCheckouts(
  pool: pg.Pool,
  opts: { staleAfterMs: number | undefined; connectRetries: number },
): void {
  const idleSince = new WeakMap<pg.PoolClient, number>();
  pool.on('release', (_err, client) => idleSince.set(client as pg.PoolClient, Date.now()));
  const checkout = pool.connect.bind(pool) as () => Promise<pg.PoolClient>;
  const fresh = async (): Promise<pg.PoolClient> => {
    for (let failures = 0; ; ) {
      let client: pg.PoolClient;
      try {
        client = await checkout();
      } catch (err) {
        if (failures++ < opts.connectRetries && isConnectionError(err)) continue;
        throw err;
      }
      const since = idleSince.get(client);
      if (opts.staleAfterMs !== undefined && since !== undefined) {
        if (Date.now() - since >= opts.staleAfterMs) {
          client.release(new Error('idle for as long as the server keeps a session'));
          continue;
        }
      }
      return client;
    }
  };
  // Both forms pg-pool offers: a promise, and the callback pool.query uses.
  pool.connect = ((
    callback?: (err: Error | undefined, client?: pg.PoolClient, done?: () => void) => void,
  ) => {
    if (!callback) return fresh();
    fresh().then(
      (client) => callback(undefined, client, () => client.release()),
      (err: Error) => callback(err),
    );
    return undefined;
  }) as pg.Pool['connect'];
}

/**
 * Whether an error means the connection itself is gone or unusable (the
 * server ended it, failed over, or could not be reached), rather than a
 * statement that failed on a healthy connection. Such a request may be sent
 * again on a fresh connection: it answers 503.
 */
export function isConnectionError(err: unknown): boolean {
  const code = sqlState(err);
  if (code !== undefined) {
    // Class 08: connection exception; 57P01-57P05: the server is shutting
    // down, crashed, cannot accept connections yet, or ended an idle session.
    return code.startsWith('08') || /^57P0[1-5]$/.test(code);
  }
  if (!(err instanceof Error)) return false;
  const sys = (err as NodeJS.ErrnoException).code;
  if (sys && ['ECONNRESET', 'ECONNREFUSED', 'EPIPE', 'ETIMEDOUT', 'EHOSTUNREACH'].includes(sys)) {
    return true;
  }
  // node-postgres' own messages for a socket that closed, a client that saw a
  // connection error, and a pool that could not connect in time.
  return /Connection terminated|not queryable|timeout exceeded when trying to connect|Connection ended/i.test(
    err.message,
  );
}

/**
 * Runs `fn` with a client checked out of the pool. While it is out, the client
 * has an error listener: a FATAL message from the server (a terminated
 * backend, a failover, an idle-session timeout) that arrives between two
 * queries is an 'error' event, and without a listener Node ends the process.
 * The client goes back to the pool unless its connection broke, in which case
 * it is closed and the next caller gets a fresh one.
 */
export async function withClient<T>(
  pool: Pool,
  fn: (client: pg.PoolClient, markBroken: (err: Error) => void) => Promise<T>,
): Promise<T> {
  const client = await pool.connect();
  let broken: Error | undefined;
  const onError = (err: Error) => {
    broken ??= err;
  };
  client.on('error', onError);
  try {
    return await fn(client, onError);
  } catch (err) {
    if (isConnectionError(err)) broken ??= err instanceof Error ? err : new Error(String(err));
    throw err;
  } finally {
    client.removeListener('error', onError);
    client.release(broken);
  }
}
