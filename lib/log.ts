// Structured logs: one JSON object per line on stderr, which is what Lambda
// ships to CloudWatch and what `npm start` prints. Inside a request, every line
// carries that request's id.
import { AsyncLocalStorage } from 'node:async_hooks';

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

function describe(err: unknown): Record<string, unknown> {
  if (err instanceof Error) {
    const code = (err as { code?: unknown }).code;
    return {
      error: err.message,
      error_name: err.name,
      ...(code ? { error_code: code } : {}),
    };
  }
  return { error: String(err) };
}

let quiet = false;
/** Silences logging (tests that provoke errors on purpose). */
export function setQuiet(value: boolean): void {
  quiet = value;
}

/** Writes one log line; an `err` field is expanded into its message, name and code. */
export function log(level: LogLevel, message: string, fields: Record<string, unknown> = {}): void {
  if (quiet) return;
  const { err, ...rest } = fields;
  const requestId = currentRequestId();
  const line = {
    level,
    time: new Date().toISOString(),
    message,
    ...(requestId ? { request_id: requestId } : {}),
    ...rest,
    ...(err === undefined ? {} : describe(err)),
  };
  process.stderr.write(`${JSON.stringify(line)}\n`);
}
