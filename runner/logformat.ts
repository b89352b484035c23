// The runner's own lines (runner started, claim failed, task finished ...),
// as a person reads them on a terminal or as JSON lines for a log system:
// `--log-format text|json`, text by default when stderr is a terminal
// (docs/runner.md, "Its log").
import { log as jsonLog } from '../lib/log.ts';
import type { Logger, LogLevel } from './events.ts';

export const LOG_FORMATS = ['text', 'json'] as const;
export type LogFormat = (typeof LOG_FORMATS)[number];

/** The format asked for, else text on a terminal and JSON otherwise. */
export function chooseLogFormat(asked: LogFormat | undefined, isTTY: boolean): LogFormat {
  return asked ?? (isTTY ? 'text' : 'json');
}

/** A logger writing `format` lines: JSON through lib/log.ts, text to `write`. */
export function loggerFor(format: LogFormat, write: (line: string) => void): Logger {
  if (format === 'json') return jsonLog;
  return (level, message, fields = {}) => write(textLine(level, message, fields, new Date()));
}

// A value as `key=value` shows it: bare when it has no spaces or quotes.
function shown(value: unknown): string {
  if (Array.isArray(value)) return value.map(String).join(',');
  if (value !== null && typeof value === 'object') return JSON.stringify(value);
  const text = String(value);
  return /^[^\s"=]+$/.test(text) ? text : JSON.stringify(text);
}

/**
 * One line for a person: `12:00:01 warn  claim failed; retrying with backoff:
 * connect ECONNREFUSED (failures=1)`. An error's message follows the message;
 * fields that are null or false are left out.
 */
export function textLine(
  level: LogLevel,
  message: string,
  fields: Record<string, unknown>,
  at: Date,
): string {
  const { err, ...rest } = fields;
  const time = at.toISOString().slice(11, 19);
  const error = err === undefined ? '' : `: ${err instanceof Error ? err.message : String(err)}`;
  const pairs = Object.entries(rest)
    .filter(([, value]) => value !== null && value !== undefined && value !== false)
    .map(([key, value]) => `${key}=${shown(value)}`);
  return `${time} ${level.padEnd(5)} ${message}${error}${pairs.length ? ` (${pairs.join(' ')})` : ''}`;
}
