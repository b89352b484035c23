import pg from 'pg';

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

/** A connection pool built from configuration; errors on idle connections are logged, never fatal. */
export function createPool(config: PoolConfig, onIdleError?: (err: Error) => void): Pool {
  const pool = new pg.Pool({
    connectionString: config.url,
    max: config.max ?? 10,
    idleTimeoutMillis: config.idleTimeoutMs ?? 30_000,
    // Long enough for Aurora Serverless to resume from a pause (about 15 s).
    connectionTimeoutMillis: config.connectTimeoutMs ?? 20_000,
    application_name: config.applicationName ?? 'conductor',
    types,
  });
  // An idle client whose server went away emits 'error' on the pool; without a
  // listener Node would crash the process.
  pool.on('error', (err) => onIdleError?.(err));
  return pool;
}
