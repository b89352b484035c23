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

/** A connection pool built from configuration; errors on idle connections are logged, never fatal. */
export function createPool(config: PoolConfig, onIdleError?: (err: Error) => void): Pool {
  const pool = new pg.Pool({
    connectionString: config.url,
    max: config.max ?? 10,
    idleTimeoutMillis: config.idleTimeoutMs ?? 30_000,
    // Long enough for Aurora Serverless to resume from a pause (about 15 s).
    connectionTimeoutMillis: config.connectTimeoutMs ?? 20_000,
    application_name: config.applicationName ?? 'conductor',
    options: SESSION_OPTIONS,
    types,
  });
  // An idle client whose server went away emits 'error' on the pool; without a
  // listener Node would crash the process.
  pool.on('error', (err) => onIdleError?.(err));
  return pool;
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
