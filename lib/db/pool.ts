import pg from 'pg';
import { sqlState } from './sqlstate.ts';

export interface PoolConfig {
  /** A postgres:// connection string. */
  url: string;
  /** Connections per pool; on Lambda keep this small, one pool per container. */
  max?: number;
  /** How long a connection may sit idle in the pool before it is closed. */
  idleTimeoutMs?: number;
  /**
   * How long to wait for a connection (a free slot, the TCP connect and the
   * startup exchange) before failing the request. Default 10 s; the
   * deployment passes CONDUCTOR_DB_CONNECT_TIMEOUT_MS (20 s: an Aurora resume).
   */
  connectTimeoutMs?: number;
  /**
   * The server's `statement_timeout` for statements sent outside the
   * transaction helper (which sets its own per transaction). Default 8 s; 0
   * leaves the server's setting.
   */
  statementTimeoutMs?: number;
  /**
   * How long the client waits for the reply to one query before it gives the
   * connection up as silent. Default: the statement timeout plus 2 s; 0: no
   * bound. See queryTimeoutFor.
   */
  queryTimeoutMs?: number;
  /** Idle time before TCP keepalive probes start; default 10 s. */
  keepAliveDelayMs?: number;
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

/**
 * The bounds of a database call (docs/database.md, "Bounded calls"). The
 * server's statement timeout ends a slow statement first, on a healthy
 * network, with 57014: the statement rolled back and the connection stays
 * usable. The client's query timeout, a margin above it, fires only when no
 * reply comes at all (a silent network, a half-open connection): the
 * statement may then have committed or not, and the connection is destroyed.
 * 8 s sits above the hot path's lock_timeout (5 s, migrations/002-004), so a
 * lock wait ends as 55P03 and not as a statement timeout.
 */
export const CALL_BOUNDS = {
  statementTimeoutMs: 8_000,
  queryTimeoutMarginMs: 2_000,
  connectTimeoutMs: 10_000,
  keepAliveDelayMs: 10_000,
} as const;

// setTimeout's largest delay (about 24.8 days); above it Node fires at once.
const NO_QUERY_TIMEOUT_MS = 2 ** 31 - 1;

/**
 * The client-side bound for a query that runs under `statementTimeoutMs` on
 * the server: that timeout plus a margin for the reply to travel, or no bound
 * for a statement the server lets run forever (migrations).
 */
export function queryTimeoutFor(statementTimeoutMs: number): number {
  return statementTimeoutMs > 0
    ? statementTimeoutMs + CALL_BOUNDS.queryTimeoutMarginMs
    : NO_QUERY_TIMEOUT_MS;
}

// A pooled client idle within this much of the server's idle_session_timeout
// may be ended by the server while our first query is on its way: drop it.
const IDLE_SESSION_MARGIN_MS = 5_000;

/**
 * The URL without its `options` parameter, and the startup options to send:
 * the URL's first, then ours. node-postgres lets a URL's `options` replace
 * the pool's `options` whole, so `?options=-c search_path=x` in
 * DATABASE_URL silently dropped SESSION_OPTIONS and left every statement at
 * the server's default isolation, READ COMMITTED (found in review of #36).
 * Merged, the URL's settings still apply, and for a setting both name
 * (PostgreSQL takes the last `-c` of a name) ours hold.
 */
export function mergeUrlOptions(url: string, ours: string): { url: string; options: string } {
  let parsed: URL;
  try {
    parsed = new URL(url);
  } catch {
    return { url, options: ours };
  }
  const theirs = parsed.searchParams.get('options');
  if (theirs === null) return { url, options: ours };
  parsed.searchParams.delete('options');
  return { url: parsed.toString(), options: theirs.trim() ? `${theirs.trim()} ${ours}` : ours };
}

/** A connection pool built from configuration; errors on idle connections are logged, never fatal. */
export function createPool(config: PoolConfig, onIdleError?: (err: Error) => void): Pool {
  const idleSessionMs = config.idleSessionTimeoutMs ?? DEFAULT_IDLE_SESSION_TIMEOUT_MS;
  const statementMs = config.statementTimeoutMs ?? CALL_BOUNDS.statementTimeoutMs;
  const queryMs = config.queryTimeoutMs ?? queryTimeoutFor(statementMs);
  // Startup options are client settings (no round trip, no session SET):
  // idle_session_timeout exists from PostgreSQL 14 on.
  const options = [SESSION_OPTIONS];
  if (idleSessionMs > 0) options.push(`-c idle_session_timeout=${Math.trunc(idleSessionMs)}`);
  if (statementMs > 0) options.push(`-c statement_timeout=${Math.trunc(statementMs)}`);
  const merged = mergeUrlOptions(config.url, options.join(' '));
  const pool = new pg.Pool({
    ...(config.password
      ? settingsOf(merged.url, config.password)
      : { connectionString: merged.url }),
    max: config.max ?? 10,
    idleTimeoutMillis: config.idleTimeoutMs ?? 30_000,
    // Bounds the slot wait and the connect together: a connect into a silent
    // network (the TCP handshake answered, the startup never) ends here.
    connectionTimeoutMillis: config.connectTimeoutMs ?? CALL_BOUNDS.connectTimeoutMs,
    query_timeout: queryMs > 0 ? queryMs : undefined,
    // Probes on an idle pooled connection find a peer that vanished (a
    // failover, a NAT that dropped the flow) before a request is sent on it,
    // and keep NAT and proxies from dropping a quiet flow.
    keepAlive: true,
    keepAliveInitialDelayMillis: config.keepAliveDelayMs ?? CALL_BOUNDS.keepAliveDelayMs,
    application_name: config.applicationName ?? 'conductor',
    options: merged.options,
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
 * never handed out when the server may already have ended its session or its
 * connection already failed, and a connect that failed on the connection is
 * tried once more. Only these are retried, because nothing of the caller's
 * has reached the server yet: a statement that failed on a broken connection
 * may or may not have run, and is never sent again here. A pool's idle timer
 * does not run while a Lambda container is frozen, so on thaw a client idle
 * for minutes would otherwise be handed out before the timer (or the server's
 * goodbye) removes it.
 */
function guardCheckouts(
  pool: pg.Pool,
  opts: { staleAfterMs: number | undefined; connectRetries: number },
): void {
  const idleSince = new WeakMap<pg.PoolClient, number>();
  pool.on('release', (_err, client) => idleSince.set(client as pg.PoolClient, Date.now()));
  // pg-pool takes its own error listener off a client when it hands it out,
  // before the caller can add one; a FATAL message that arrives in the same
  // read as the connect's ReadyForQuery (a backend terminated right after its
  // startup) is then emitted with no listener, and Node ends the process
  // (the faults test's "terminating connection due to administrator
  // command"). So every client gets a listener for its whole life, from
  // before its first hand-out, and the checkout below looks at what it saw.
  const failed = new WeakMap<pg.ClientBase, Error>();
  pool.on('connect', (client) => {
    client.on('error', (err: Error) => {
      if (!failed.has(client)) failed.set(client, err);
    });
  });
  const checkout = pool.connect.bind(pool) as () => Promise<pg.PoolClient>;
  const fresh = async (): Promise<pg.PoolClient> => {
    for (let failures = 0; ; ) {
      let client: pg.PoolClient;
      try {
        client = await checkout();
      } catch (err) {
        // A connect that timed out has spent the caller's whole budget:
        // trying again would double the bound.
        if (failures++ < opts.connectRetries && isConnectionError(err) && !isSilence(err)) {
          continue;
        }
        throw err;
      }
      const lost = failed.get(client);
      if (lost) {
        client.release(lost);
        if (failures++ < opts.connectRetries) continue;
        throw lost;
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

// node-postgres' messages for a query whose reply did not come within
// query_timeout, a connect that did not finish within connectionTimeoutMillis
// (the pool's timer or the client's own), and a wait for a pool slot that did
// not end within it.
const SILENCE =
  /^Query read timeout$|due to connection timeout|^timeout expired$|timeout exceeded when trying to connect/i;

/**
 * Whether the database did not answer within the client's bound (a query
 * timeout, a connect timeout): the network or the server is silent. Every
 * call after it would wait out the same bound.
 */
export function isSilence(err: unknown): boolean {
  return err instanceof Error && sqlState(err) === undefined && SILENCE.test(err.message);
}

/**
 * Whether an error means the connection itself is gone or unusable (the
 * server ended it, failed over, could not be reached, or went silent past the
 * query timeout), rather than a statement that failed on a healthy
 * connection. Such a connection is never used again, and the request may be
 * sent again on a fresh one: it answers 503.
 */
export function isConnectionError(err: unknown): boolean {
  const code = sqlState(err);
  if (code !== undefined) {
    // Class 08: connection exception; 57P01-57P05: the server is shutting
    // down, crashed, cannot accept connections yet, or ended an idle
    // session; 25P03: it ended a session idle in a transaction.
    return code.startsWith('08') || /^57P0[1-5]$/.test(code) || code === '25P03';
  }
  if (!(err instanceof Error)) return false;
  const sys = (err as NodeJS.ErrnoException).code;
  // EAI_AGAIN and ENOTFOUND: the name did not resolve (DNS during a failover).
  if (
    sys &&
    [
      'ECONNRESET',
      'ECONNREFUSED',
      'ECONNABORTED',
      'EPIPE',
      'ETIMEDOUT',
      'EHOSTUNREACH',
      'ENETUNREACH',
      'EAI_AGAIN',
      'ENOTFOUND',
    ].includes(sys)
  ) {
    return true;
  }
  // A query that timed out leaves the connection mid-protocol: its reply (or
  // nothing) may still come, so the connection cannot carry another query.
  if (isSilence(err)) return true;
  // node-postgres' own messages for a socket that closed and a client that
  // saw a connection error.
  return /Connection terminated|not queryable|Connection ended/i.test(err.message);
}

/**
 * Runs `fn` with a client checked out of the pool. A FATAL message from the
 * server (a terminated backend, a failover, an idle-session timeout) that
 * arrives between two queries is an 'error' event on the client (every
 * client of createPool has a listener, see guardCheckouts); the one here
 * marks the client broken. The client goes back to the pool unless its
 * connection broke or went silent, in which case it is closed and the next
 * caller gets a fresh one.
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
