// What every command group shares: the settings (CONDUCTOR_URL,
// CONDUCTOR_ADMIN_TOKEN or the local stack's token file, --url, --token,
// --json), the HTTP client with errors that say what to do, naming a job as
// `PROJECT#NUMBER`, and the output (a table for people, one JSON document
// with --json).
import { existsSync, readFileSync } from 'node:fs';
import { join, resolve } from 'node:path';
import type { Command } from 'commander';

export interface CliIo {
  out: (line: string) => void;
  env: NodeJS.ProcessEnv;
  fetch?: typeof fetch;
  /** Where secret values are read from (`secret set`, `--forge-token-file -`). */
  stdin?: AsyncIterable<string | Buffer> & { isTTY?: boolean };
  /** Asks for a value on a terminal without echoing it (used when stdin is a terminal). */
  prompt?: (question: string) => Promise<string>;
  /** What relative paths are relative to; default the process's. */
  cwd?: string;
  /** How the command is invoked, for the hints it prints (`conductor`, `npm run ctl --`). */
  name?: string;
  /** Waits between polls (`logs --follow`); tests shorten it. */
  sleep?: (ms: number) => Promise<void>;
}

/** A failure to report on one line; exit 2 for a command used wrongly, else 1. */
export class CliError extends Error {
  constructor(
    message: string,
    readonly exitCode = 1,
  ) {
    super(message);
  }
}

/** The options every command takes (on the program, so they may come anywhere). */
export interface Globals {
  url?: string;
  token?: string;
  tokenFile?: string;
  json?: boolean;
}

/** A reply of the API. */
export interface Reply {
  status: number;
  // biome-ignore lint/suspicious/noExplicitAny: the API's JSON, read field by field as docs/api.md shapes it.
  json: any;
  text: string;
  headers: Headers;
}

/** The settings, the client and the output, made for one command. */
export class Cli {
  readonly globals: Globals;
  readonly base: string;
  readonly cwd: string;
  readonly name: string;

  constructor(
    readonly io: CliIo,
    command: Command,
  ) {
    this.globals = command.optsWithGlobals<Globals>();
    const env = io.env;
    this.base = (this.globals.url ?? env.CONDUCTOR_URL ?? `http://127.0.0.1:${env.PORT || 8080}`)
      .trim()
      .replace(/\/+$/, '');
    this.cwd = io.cwd ?? process.cwd();
    this.name = io.name ?? 'conductor';
  }

  /** The admin token: --token-file, --token, CONDUCTOR_ADMIN_TOKEN, else the local stack's file. */
  token(): string {
    const { tokenFile, token } = this.globals;
    if (tokenFile !== undefined) return readKept(tokenFile, this.cwd);
    if (token) return token;
    if (this.io.env.CONDUCTOR_ADMIN_TOKEN) return this.io.env.CONDUCTOR_ADMIN_TOKEN;
    const file = this.tokenFile();
    if (existsSync(file)) return readFileSync(file, 'utf8').trim();
    throw new CliError(
      `no admin token: set CONDUCTOR_ADMIN_TOKEN, give --token-file PATH, or run this where \`conductor server\` or \`npm start\` keeps ${join(this.io.env.CONDUCTOR_DATA_DIR || '.conductor', 'admin-token')}`,
      2,
    );
  }

  tokenFile(): string {
    return resolve(this.cwd, this.io.env.CONDUCTOR_DATA_DIR || '.conductor', 'admin-token');
  }

  /** Sends one request with the admin token; a refusal or an HTTP error is a CliError saying what to do. */
  async call(
    method: string,
    path: string,
    body?: unknown,
    init: { redirect?: 'manual' } = {},
  ): Promise<Reply> {
    const token = this.token();
    const res = await this.send(`${this.base}${path}`, {
      method,
      headers: {
        authorization: `Bearer ${token}`,
        ...(body === undefined ? {} : { 'content-type': 'application/json' }),
      },
      body: body === undefined ? undefined : JSON.stringify(body),
      ...init,
    });
    const text = await res.text();
    // biome-ignore lint/suspicious/noExplicitAny: the API's error shape, when JSON.
    const json: any =
      text && res.headers.get('content-type')?.includes('json') ? safeJson(text) : null;
    if (res.status === 401) {
      throw new CliError(
        `${method} ${path}: the admin token was refused; the token \`npm start\` printed is in \`.conductor/admin-token\` (or give --token-file PATH, or set CONDUCTOR_ADMIN_TOKEN)`,
      );
    }
    if (!res.ok && !(init.redirect === 'manual' && res.status >= 300 && res.status < 400)) {
      const message = json?.error?.message ?? (text || res.statusText);
      throw new CliError(`${method} ${path}: HTTP ${res.status}: ${message}`);
    }
    return { status: res.status, json, text, headers: res.headers };
  }

  /** fetch, with an unreachable server said as such. */
  async send(url: string | URL | Request, init?: RequestInit): Promise<Response> {
    try {
      return await (this.io.fetch ?? fetch)(url, init);
    } catch (err) {
      if (String(url instanceof Request ? url.url : url).startsWith(this.base)) {
        throw new CliError(
          `could not reach ${this.base}: is \`conductor server\` or \`npm start\` running? \`--url\` or CONDUCTOR_URL`,
        );
      }
      throw err;
    }
  }

  /**
   * A job's id from what the user typed: an id, `PROJECT#NUMBER`, or a
   * number with --project. A number is found through the project's job list
   * (newest first, `before` a number), so it needs no route of its own.
   */
  async jobId(ref: string, project?: string): Promise<string> {
    const named = /^(.+)#(\d+)$/.exec(ref);
    const [p, n] = named ? [named[1]!, named[2]!] : /^\d+$/.test(ref) ? [project, ref] : [];
    if (n === undefined) return ref;
    if (!p) throw new CliError(`job ${ref}: give it as PROJECT#${ref}, or with --project`, 2);
    const number = Number(n);
    const { jobs } = (
      await this.call(
        'GET',
        `/v1/projects/${encodeURIComponent(p)}/jobs?limit=1&before=${number + 1}`,
      )
    ).json;
    const job = jobs?.[0];
    if (!job || job.number !== number) throw new CliError(`${p} has no job #${number}`);
    return job.id;
  }

  /** Prints `value` as one JSON document with --json, else runs `human`. */
  print(value: unknown, human: () => void): void {
    if (this.globals.json) this.io.out(JSON.stringify(value, null, 2));
    else human();
  }

  /** A line for people only (never under --json, whose output is one document). */
  say(line: string): void {
    if (!this.globals.json) this.io.out(line);
  }

  /** Columns padded to their widest cell; nothing but the header for no rows. */
  table(headers: string[], rows: (string | number | null | undefined)[][]): void {
    const cells = [headers, ...rows.map((r) => r.map((c) => (c == null ? '' : String(c))))];
    const widths = headers.map((_, i) => Math.max(...cells.map((r) => (r[i] ?? '').length)));
    for (const row of cells) {
      this.io.out(
        row
          .map((c, i) => (i === row.length - 1 ? c : (c ?? '').padEnd(widths[i]!)))
          .join('  ')
          .trimEnd(),
      );
    }
  }
}

function safeJson(text: string): unknown {
  try {
    return JSON.parse(text);
  } catch {
    return null;
  }
}

/** A token or secret kept in a file (one final line feed dropped), so it stays off the command line. */
export function readKept(path: string, cwd: string): string {
  try {
    return readFileSync(resolve(cwd, path), 'utf8').replace(/\r?\n$/, '');
  } catch (err) {
    throw new CliError(`cannot read ${path}: ${(err as Error).message}`, 2);
  }
}

/** `--input NAME=VALUE` (or `--field`) flags as an object, or undefined when none. */
export function pairs(
  flag: string,
  list: string[] | undefined,
): Record<string, string> | undefined {
  if (!list || list.length === 0) return undefined;
  const out: Record<string, string> = {};
  for (const pair of list) {
    const eq = pair.indexOf('=');
    if (eq <= 0) throw new CliError(`--${flag} ${pair}: expected NAME=VALUE`, 2);
    out[pair.slice(0, eq)] = pair.slice(eq + 1);
  }
  return out;
}

/** Collects a repeatable option's values. */
export const many = (value: string, previous: string[] = []): string[] => [...previous, value];

/** `true`/`false` options; anything else is a usage error naming the flag. */
export function bool(flag: string, value: string | undefined): boolean | undefined {
  if (value === undefined) return undefined;
  if (value === 'true' || value === 'false') return value === 'true';
  throw new CliError(`--${flag} takes true or false, not ${JSON.stringify(value)}`, 2);
}

/** Requires an option the API needs. */
export function need(flag: string, value: string | undefined): string {
  if (value === undefined || value === '') throw new CliError(`--${flag} is required`, 2);
  return value;
}

/** Seconds between two timestamps, as people read them (`4s`, `2m05s`). */
export function duration(from: string | null, to: string | null): string {
  if (!from) return '';
  const s = Math.max(0, Math.round(((to ? Date.parse(to) : Date.now()) - Date.parse(from)) / 1000));
  if (s < 60) return `${s}s`;
  const m = Math.floor(s / 60);
  if (m < 60) return `${m}m${String(s % 60).padStart(2, '0')}s`;
  return `${Math.floor(m / 60)}h${String(m % 60).padStart(2, '0')}m`;
}

/** Everything a stream holds, as text. */
export async function readAll(stream: AsyncIterable<string | Buffer>): Promise<string> {
  const chunks: Buffer[] = [];
  for await (const chunk of stream) {
    chunks.push(typeof chunk === 'string' ? Buffer.from(chunk, 'utf8') : chunk);
  }
  return Buffer.concat(chunks).toString('utf8');
}

/**
 * A secret value from a file, or with `-` (or no path) from standard input: a
 * terminal is asked without echo, anything else read to its end. One final
 * line feed is dropped (what `echo` and editors add); an empty value is refused.
 */
export async function readValue(
  io: CliIo,
  what: string,
  path: string | undefined,
): Promise<string> {
  let value: string;
  if (path !== undefined && path !== '-') {
    value = readKept(path, io.cwd ?? process.cwd());
  } else if (io.stdin?.isTTY && io.prompt) {
    value = await io.prompt(`${what} (not echoed): `);
  } else if (io.stdin) {
    value = await readAll(io.stdin);
  } else {
    throw new CliError(`no standard input to read ${what} from: give a file`, 2);
  }
  value = value.replace(/\r?\n$/, '');
  if (value === '') throw new CliError(`${what} is empty: nothing was set`, 2);
  return value;
}

// Values that show wherever the command line does: npm prints it (`npm run
// ctl`), the shell keeps it in its history, `ps` lists it.
const ON_THE_LINE =
  'the command line is seen (npm prints it, the shell keeps it in its history, ps lists it)';

/** Refuses a secret given on the command line (`--value`, `--forge-token`), saying where it goes instead. */
export function refuseOnTheLine(io: CliIo, flag: string, value: unknown, instead: string): void {
  if (value === undefined) return;
  throw new CliError(
    `--${flag} is refused: ${ON_THE_LINE}. ${instead.replaceAll('CLI', io.name ?? 'conductor')}`,
    2,
  );
}

/** A path segment for the API. */
export const seg = encodeURIComponent;
