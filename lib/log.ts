// Structured logs, one JSON object per line. In a Lambda function they go
// through Powertools Logger (`logger` below, with `injectLambdaContext` in
// the functions' middleware): function name, cold start, the Lambda request
// id, the level from POWERTOOLS_LOG_LEVEL. Elsewhere (`npm start`, the tests)
// the same fields go to stderr through this small facade. Inside an HTTP
// request every line carries that request's id, and an error is logged with
// its stack and its chain of causes.
import { AsyncLocalStorage } from 'node:async_hooks';
import { Logger } from '@aws-lambda-powertools/logger';

export type LogLevel = 'debug' | 'info' | 'warn' | 'error';

const scope = new AsyncLocalStorage<{ requestId: string }>();

/** Runs `fn` with every log line inside it tagged with `requestId`. */
export function withRequestId<T>(requestId: string, fn: () => T): T {
  return scope.run({ requestId }, fn);
}

/** The id of the request being served, if any. */
export function currentRequestId(): string | undefined {
  return scope.getStore()?.requestId;
}

const inLambda = process.env.AWS_LAMBDA_FUNCTION_NAME !== undefined;

/** The Powertools logger the Lambda functions log through (and inject their context into). */
export const logger = new Logger({ serviceName: 'conductor' });

const LEVELS: Record<LogLevel, number> = { debug: 10, info: 20, warn: 30, error: 40 };
const threshold = (() => {
  const name = (process.env.POWERTOOLS_LOG_LEVEL ?? process.env.LOG_LEVEL ?? 'info').toLowerCase();
  return LEVELS[name as LogLevel] ?? LEVELS.info;
})();

/** An error as fields: message, name, code, stack, and each cause in turn (bounded). */
export function describeError(err: unknown, depth = 0): Record<string, unknown> {
  if (!(err instanceof Error)) return { message: String(err) };
  const code = (err as { code?: unknown }).code;
  return {
    name: err.name,
    message: err.message,
    ...(code ? { code } : {}),
    ...(err.stack ? { stack: err.stack } : {}),
    ...(err.cause !== undefined && depth < 5 ? { cause: describeError(err.cause, depth + 1) } : {}),
  };
}

let quiet = false;
/** Silences logging (tests that provoke errors on purpose). */
export function setQuiet(value: boolean): void {
  quiet = value;
}

/**
 * Writes one log line. An `err` field becomes `error` with the message, name,
 * code, stack and causes; its message and code are also kept flat
 * (`error_message`, `error_code`) so a log query can filter on them.
 */
export function log(level: LogLevel, message: string, fields: Record<string, unknown> = {}): void {
  if (quiet || LEVELS[level] < threshold) return;
  const { err, ...rest } = fields;
  const requestId = currentRequestId();
  const error = err === undefined ? {} : errorFields(err);
  const extra = { ...(requestId ? { request_id: requestId } : {}), ...rest, ...error };
  if (inLambda) {
    logger[level](message, extra);
    return;
  }
  const line = { level, time: new Date().toISOString(), message, ...extra };
  process.stderr.write(`${JSON.stringify(line)}\n`);
}

function errorFields(err: unknown): Record<string, unknown> {
  const described = describeError(err);
  return {
    error: described,
    error_message: described.message,
    ...(described.code ? { error_code: described.code } : {}),
  };
}
