// Structured logs: one JSON object per line on stderr, which is what Lambda
// ships to CloudWatch and what `npm start` prints.

export type LogLevel = 'debug' | 'info' | 'warn' | 'error';

function describe(err: unknown): Record<string, unknown> {
  if (err instanceof Error) {
    const code = (err as { code?: unknown }).code;
    return { error: err.message, error_name: err.name, ...(code ? { error_code: code } : {}) };
  }
  return { error: String(err) };
}

/** Writes one log line; an `err` field is expanded into its message, name and code. */
export function log(level: LogLevel, message: string, fields: Record<string, unknown> = {}): void {
  const { err, ...rest } = fields;
  const line = {
    level,
    time: new Date().toISOString(),
    message,
    ...rest,
    ...(err === undefined ? {} : describe(err)),
  };
  process.stderr.write(`${JSON.stringify(line)}\n`);
}
