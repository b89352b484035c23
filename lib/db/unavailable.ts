// The failures of a database call that pass: the request did nothing that
// stays (the statement was cancelled or rolled back, or the connection went
// before an answer), and sent again it may succeed. They answer
// `503 unavailable` with Retry-After, and the sweep leaves such a row for its
// next pass instead of counting an error.
import { RETRY_AFTER_S, UnavailableError } from '../errors.ts';
import { isConnectionError, isSilence } from './pool.ts';
import { RETRYABLE_SQLSTATES, SQLSTATE, sqlState } from './sqlstate.ts';

/** What kind of passing failure an error is. */
export type Unavailability =
  /** No answer within the client's bound: a query or connect timeout. */
  | 'silent'
  /** The connection ended: a terminated backend, a failover, a reset. */
  | 'connection'
  /** 55P03: a row or table lock was not granted within lock_timeout. */
  | 'lock-timeout'
  /** 57014: statement_timeout, or a backend cancelled by an operator. */
  | 'statement-timeout'
  /** 40001/40P01 after the helper's last retry. */
  | 'contention'
  /** 53300: the server has no connection slot left. */
  | 'capacity';

const MESSAGES: Record<Unavailability, string> = {
  silent: 'the database did not answer in time; try again',
  connection: 'the database connection was lost; try again',
  'lock-timeout': 'a row this request needs is locked by other work; try again',
  'statement-timeout': 'the database took too long to answer; try again',
  contention: 'the database was too busy with conflicting changes; try again',
  capacity: 'the database has no connection to spare; try again',
};

/**
 * The kind of passing failure `err` is, looking through its causes (an error
 * that wraps a lock timeout is still one), or undefined for any other error.
 */
export function unavailability(err: unknown): Unavailability | undefined {
  let e: unknown = err;
  for (let depth = 0; depth < 5 && e !== undefined && e !== null; depth++) {
    if (isSilence(e)) return 'silent';
    if (isConnectionError(e)) return 'connection';
    const code = sqlState(e);
    if (code === SQLSTATE.lockNotAvailable) return 'lock-timeout';
    if (code === SQLSTATE.queryCanceled) return 'statement-timeout';
    if (code !== undefined && RETRYABLE_SQLSTATES.has(code)) return 'contention';
    if (code === SQLSTATE.tooManyConnections) return 'capacity';
    e = e instanceof Error ? e.cause : undefined;
  }
  return undefined;
}

/** `err` as the UnavailableError a client is answered with, or undefined when it is not one that passes. */
export function asUnavailable(err: unknown): UnavailableError | undefined {
  if (err instanceof UnavailableError) return err;
  const kind = unavailability(err);
  if (!kind) return undefined;
  return new UnavailableError(MESSAGES[kind], {
    cause: err,
    retryAfterS:
      kind === 'silent' || kind === 'capacity' ? RETRY_AFTER_S.silent : RETRY_AFTER_S.soon,
  });
}
