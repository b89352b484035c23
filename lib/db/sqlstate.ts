/** The SQLSTATE codes the code base reacts to, by name. */
export const SQLSTATE = {
  uniqueViolation: '23505',
  foreignKeyViolation: '23503',
  checkViolation: '23514',
  notNullViolation: '23502',
  invalidTextRepresentation: '22P02',
  serializationFailure: '40001',
  deadlockDetected: '40P01',
  lockNotAvailable: '55P03',
  queryCanceled: '57014',
  idleInTransactionTimeout: '25P03',
  tooManyConnections: '53300',
  /** A prepared plan meeting a row whose column changed type (isStalePlan). */
  datatypeMismatch: '42804',
  /** Among others, "cached plan must not change result type" (isStalePlan). */
  featureNotSupported: '0A000',
} as const;

/** Errors after which running the whole transaction again can succeed. */
export const RETRYABLE_SQLSTATES: ReadonlySet<string> = new Set([
  SQLSTATE.serializationFailure,
  SQLSTATE.deadlockDetected,
]);

/** The SQLSTATE of an error raised by PostgreSQL, or undefined for anything else. */
export function sqlState(err: unknown): string | undefined {
  if (typeof err === 'object' && err !== null && 'code' in err) {
    const code = (err as { code: unknown }).code;
    if (typeof code === 'string' && /^[0-9A-Z]{5}$/.test(code)) return code;
  }
  return undefined;
}
