// One statement in its own (implicit) transaction at REPEATABLE READ: the hot
// paths' claim, outcome, heartbeat and worker check are each a single
// statement, so they cost one round trip instead of BEGIN, the statement and
// COMMIT.
import type pg from 'pg';
import { type Pool, withClient } from './pool.ts';
import { RETRYABLE_SQLSTATES, SQLSTATE, sqlState } from './sqlstate.ts';
import { TransactionConflictError } from './transaction.ts';

let prepare = true;

/**
 * Whether hot statements are sent as named prepared statements, parsed and
 * planned once per connection. On by default; turn it off behind a connection
 * pooler that multiplexes sessions (RDS Proxy pins a session that prepares).
 */
export function setPreparedStatements(on: boolean): void {
  prepare = on;
}

/** A query config that is a named prepared statement when those are on. */
export function prepared(name: string, text: string, values: unknown[]): pg.QueryConfig {
  return prepare ? { name, text, values } : { text, values };
}

export interface StatementOptions {
  /** Retries on 40001/40P01 (possible only through lock waits); default 5. */
  maxRetries?: number;
}

export interface StatementResult<R extends pg.QueryResultRow> {
  result: pg.QueryResult<R>;
  retries: number;
}

/**
 * Runs one statement outside an explicit transaction, so it commits on its
 * own, and runs it again at once on a serialization failure or deadlock. The
 * pool's sessions default to REPEATABLE READ (SESSION_OPTIONS in pool.ts), so
 * the statement reads one snapshot whatever the server's default: a row
 * another transaction changed and committed after that snapshot raises 40001
 * when the statement locks or writes it, and the retry takes a fresh snapshot.
 * There is no transaction to carry the helper's timeouts: the claim, outcome
 * and follow-up are calls of functions that set their own lock_timeout
 * (migrations/functions/); the heartbeat and the worker check update one row by key
 * and can wait only for transactions that carry them. Takes a pool, never the
 * client of an open transaction: a retry there would run in a transaction
 * that already failed. A statement that failed on a healthy connection keeps
 * it (pool.query would close it, and 40001s would cost a reconnect each).
 */
export async function statementWithStats<R extends pg.QueryResultRow>(
  db: Pool,
  query: pg.QueryConfig,
  opts: StatementOptions = {},
): Promise<StatementResult<R>> {
  const maxRetries = opts.maxRetries ?? 5;
  let retries = 0;
  let stale = 0;
  for (;;) {
    try {
      const result = await withClient(db, async (client, markBroken) => {
        try {
          return await client.query<R>(query);
        } catch (err) {
          if (isStalePlan(err)) markBroken(err as Error);
          throw err;
        }
      });
      return { result, retries };
    } catch (err) {
      // Each stale connection is closed as it is met; there are at most as
      // many as the pool holds, and new ones prepare the statement anew.
      if (isStalePlan(err) && stale++ <= db.options.max) continue;
      const code = sqlState(err);
      if (code === undefined || !RETRYABLE_SQLSTATES.has(code)) throw err;
      if (retries >= maxRetries) throw new TransactionConflictError(retries, err);
      retries++;
    }
  }
}

/**
 * Whether a statement failed because its connection prepared it before a
 * migration changed a type it reads (a column of a row type it takes apart:
 * `(c.task).*` in the claim, after migration 019 made `tasks.state` a
 * domain). PostgreSQL re-plans a prepared statement when a table it reads
 * changes, but not when the row type of a function's result does; the old
 * plan then fails at its first row with 42804 ("attribute 3 has wrong type"),
 * or its re-plan with 0A000 ("cached plan must not change result type"),
 * and goes on failing on that connection. Nothing was done: the statement's
 * own transaction rolled back. The caller closes the connection and runs the
 * statement again on another (docs/database.md, "Single statements"). It
 * happens whenever a migration runs while the code is warm: during a deploy
 * (the migration runs before the functions get their new code), or a
 * migration by hand.
 */
export function isStalePlan(err: unknown): boolean {
  const code = sqlState(err);
  const message = err instanceof Error ? err.message : '';
  return (
    (code === SQLSTATE.datatypeMismatch && /^attribute \d+ has wrong type/.test(message)) ||
    (code === SQLSTATE.featureNotSupported &&
      /^cached plan must not change result type/.test(message))
  );
}

/** Runs one statement in its own transaction (see statementWithStats) and answers its rows. */
export async function statement<R extends pg.QueryResultRow>(
  db: Pool,
  query: pg.QueryConfig,
  opts: StatementOptions = {},
): Promise<R[]> {
  return (await statementWithStats<R>(db, query, opts)).result.rows;
}
