// The server as an operator runs it: a child process of scripts/server.ts,
// scripts/start.ts (local/serve.ts) or an installed `conductor server`, its output collected, its address read
// from what it prints, stopped with SIGTERM.
import { type ChildProcess, spawn } from 'node:child_process';
import { join } from 'node:path';
import { after } from 'node:test';

export const ROOT = join(import.meta.dirname, '..', '..');

export interface ServerProcess {
  child: ChildProcess;
  /** Everything it printed so far, stdout and stderr interleaved as they came. */
  output(): string;
  /** Its JSON log lines (stderr) so far. */
  // biome-ignore lint/suspicious/noExplicitAny: log lines are whatever fields they carry
  logLines(): any[];
  /** Resolves with the exit code once it exits. */
  exited: Promise<number | null>;
  /** The first match of `pattern` in its output, waiting up to `timeoutMs`; fails if it exits first. */
  waitFor(pattern: RegExp, timeoutMs?: number): Promise<RegExpMatchArray>;
  /** SIGTERM, and its exit code. */
  stop(): Promise<number | null>;
}

/** Runs `node --import tsx <script> ...args` in `cwd` with exactly `env` (plus PATH and HOME). */
export function runScript(
  script: string,
  args: string[],
  env: Record<string, string>,
  cwd = ROOT,
): ServerProcess {
  return runCommand(process.execPath, ['--import', 'tsx', script, ...args], env, cwd);
}

/** Runs `file ...args` (an installed command) in `cwd` with exactly `env` (plus PATH and HOME). */
export function runCommand(
  file: string,
  args: string[],
  env: Record<string, string>,
  cwd = ROOT,
): ServerProcess {
  const child = spawn(file, args, {
    cwd,
    env: { PATH: process.env.PATH ?? '', HOME: process.env.HOME ?? '/root', ...env },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let out = '';
  let err = '';
  child.stdout!.on('data', (d) => {
    out += d;
  });
  child.stderr!.on('data', (d) => {
    out += d;
    err += d;
  });
  const exited = new Promise<number | null>((done) => child.once('exit', (code) => done(code)));
  let gone = false;
  void exited.then(() => {
    gone = true;
  });
  after(() => {
    if (!gone) child.kill('SIGKILL');
  });
  const proc: ServerProcess = {
    child,
    output: () => out,
    logLines: () =>
      err
        .split('\n')
        .filter((l) => l.startsWith('{'))
        .map((l) => {
          try {
            return JSON.parse(l);
          } catch {
            return null;
          }
        })
        .filter(Boolean),
    exited,
    async waitFor(pattern, timeoutMs = 60_000) {
      const deadline = Date.now() + timeoutMs;
      for (;;) {
        const m = out.match(pattern);
        if (m) return m;
        if (gone) throw new Error(`exited before printing ${pattern}:\n${out}`);
        if (Date.now() > deadline) throw new Error(`no ${pattern} within ${timeoutMs} ms:\n${out}`);
        await new Promise((r) => setTimeout(r, 50));
      }
    },
    async stop() {
      if (!gone) child.kill('SIGTERM');
      return exited;
    },
  };
  return proc;
}
