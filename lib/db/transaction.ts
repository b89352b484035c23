import type pg from 'pg';
import { UnavailableError } from '../errors.ts';
import { isConnectionError, type Pool, queryTimeoutFor, withClient } from './pool.ts';
import { RETRYABLE_SQLSTATES, sqlState } from './sqlstate.ts';

export type Isolation = 'read committed' | 'repeatable read' | 'serializable';
/** The client of an open transaction; only `query` is meant to be used. */
export type Tx = Pick<pg.PoolClient, 'query'>;

export interface TransactionOptions {
  /** Default `repeatable read`: every read in the function sees one snapshot. */
  isolation?: Isolation;
  /** Retries after the first try on 40001/40P01; default 5. */
  maxRetries?: number;
  /** Retry at once with a fresh snapshot instead of backing off (claims). */
  immediate?: boolean;
  /**
   * `statement_timeout` for this transaction only; 0 disables it. Default 5 s.
   * The client waits for each reply this long plus a margin (queryTimeoutFor),
   * and no longer: past it the connection is taken for silent and destroyed.
   */
  statementTimeoutMs?: number;
  /** `idle_in_transaction_session_timeout` for this transaction only. Default 10 s. */
  idleTimeoutMs?: number;
  /** `lock_timeout` for this transaction only; unset leaves the server's. */
  lockTimeoutMs?: number;
  readOnly?: boolean;
  /**
   * Plan every statement as key lookups and nested loops: sequential scans,
   * bitmap scans, hash and merge joins are disabled for this transaction. For
   * transactions whose statements all start from a key, so a plan chosen
   * without statistics (a new database, a burst of new rows) cannot turn a
   * per-row lookup into a scan of the table for each row.
   */
  keyedPlans?: boolean;
  /** Called before each retry with the error that caused it (metrics, logs). */
  onRetry?: (err: unknown, retry: number) => void;
}

export interface TransactionResult<T> {
  value: T;
  /** How many times the whole function ran again after a serialization failure or deadlock. */
  retries: number;
}

/**
 * Raised when a transaction still hit 40001/40P01 after its last allowed
 * retry. It answers 503 unavailable, not 409: on the runner routes a 409
 * means "your lease is gone, stop the task", and this only means "try again"
 * (it rolled back; nothing of it committed).
 */
export class TransactionConflictError extends UnavailableError {
  readonly retries: number;
  readonly sqlState: string | undefined;
  constructor(retries: number, cause: unknown) {
    super(`the database was too busy with conflicting changes (${retries} retries); try again`, {
      cause,
    });
    this.retries = retries;
    this.sqlState = sqlState(cause);
  }
}

const DEFAULTS = {
  isolation: 'repeatable read' as Isolation,
  maxRetries: 5,
  statementTimeoutMs: 5_000,
  idleTimeoutMs: 10_000,
};

// Full jitter over an exponential window: colliding transactions spread out
// instead of colliding again in lock step.
const BACKOFF_BASE_MS = 4;
const BACKOFF_CAP_MS = 250;

function backoffMs(retry: number): number {
  const window = Math.min(BACKOFF_CAP_MS, BACKOFF_BASE_MS * 2 ** retry);
  return Math.random() * window;
}

function nonNegativeInt(name: string, v: number): number {
  if (!Number.isInteger(v) || v < 0) throw new TypeError(`${name} must be a non-negative integer`);
  return v;
}

/**
 * The transaction's client as `fn` sees it: each query carries the client-side
 * bound that matches the transaction's own statement_timeout, which may be
 * longer than the pool's default (a cancel that waits 30 s for row locks) or
 * off (migrations).
 */
function boundedTx(client: pg.PoolClient, queryTimeoutMs: number): Tx {
  // node-postgres reads query_timeout from a query's config, though its
  // types do not list it.
  const query = (config: string | pg.QueryConfig, values?: unknown[]) => {
    const bounded = typeof config === 'string' ? { text: config } : { ...config };
    Object.assign(bounded, { query_timeout: queryTimeoutMs });
    return client.query(bounded, values);
  };
  return { query: query as Tx['query'] };
}

function beginSql(opts: TransactionOptions): string {
  const isolation = opts.isolation ?? DEFAULTS.isolation;
  // Timeouts are SET LOCAL so they end with the transaction: behind RDS Proxy a
  // session-level SET would pin the connection to this client. Values are
  // integers checked above, so inlining them is safe, and BEGIN plus the
  // settings go to the server in one round trip.
  const parts = [
    `begin isolation level ${isolation}${opts.readOnly ? ' read only' : ''}`,
    `set local statement_timeout = ${nonNegativeInt('statementTimeoutMs', opts.statementTimeoutMs ?? DEFAULTS.statementTimeoutMs)}`,
    `set local idle_in_transaction_session_timeout = ${nonNegativeInt('idleTimeoutMs', opts.idleTimeoutMs ?? DEFAULTS.idleTimeoutMs)}`,
  ];
  if (opts.keyedPlans) {
    for (const setting of ['seqscan', 'bitmapscan', 'hashjoin', 'mergejoin']) {
      parts.push(`set local enable_${setting} = off`);
    }
  }
  if (opts.lockTimeoutMs !== undefined) {
    parts.push(`set local lock_timeout = ${nonNegativeInt('lockTimeoutMs', opts.lockTimeoutMs)}`);
  }
  return parts.join('; ');
}

/**
 * Runs `fn` in a transaction and reports how many retries it took. The whole
 * function runs again on serialization failure or deadlock, so it must not have
 * effects outside the database (no network calls, no counters it cannot redo).
 */
export async function transactionWithStats<T>(
  pool: Pool,
  fn: (tx: Tx) => Promise<T>,
  opts: TransactionOptions = {},
): Promise<TransactionResult<T>> {
  const maxRetries = nonNegativeInt('maxRetries', opts.maxRetries ?? DEFAULTS.maxRetries);
  const begin = beginSql(opts);
  const queryTimeoutMs = queryTimeoutFor(opts.statementTimeoutMs ?? DEFAULTS.statementTimeoutMs);
  for (let retries = 0; ; retries++) {
    try {
      const value = await withClient(pool, async (client, markBroken) => {
        const tx = boundedTx(client, queryTimeoutMs);
        await tx.query(begin);
        try {
          const value = await fn(tx);
          await tx.query('commit');
          return value;
        } catch (err) {
          // On a broken or silent connection a rollback would only wait out
          // another query timeout: the server rolls back when the connection
          // closes, and withClient closes it.
          if (isConnectionError(err)) throw err;
          // A rollback that fails means the connection is unusable (server
          // gone, socket closed): close it rather than hand it to the next
          // caller.
          await tx.query('rollback').catch(markBroken);
          throw err;
        }
      });
      return { value, retries };
    } catch (err) {
      const code = sqlState(err);
      if (code === undefined || !RETRYABLE_SQLSTATES.has(code)) throw err;
      if (retries >= maxRetries) throw new TransactionConflictError(retries, err);
      opts.onRetry?.(err, retries + 1);
    }
    if (!opts.immediate) await new Promise((r) => setTimeout(r, backoffMs(retries)));
  }
}

/** Runs `fn` in a transaction (REPEATABLE READ unless told otherwise) and returns its value. */
export async function transaction<T>(
  pool: Pool,
  fn: (tx: Tx) => Promise<T>,
  opts: TransactionOptions = {},
): Promise<T> {
  return (await transactionWithStats(pool, fn, opts)).value;
}
