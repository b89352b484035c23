// The `process` provider: runners as child processes of the process that
// runs the local stack (`npm start`), each the reference runner with --once
// and an idle limit. The worker token reaches the child in its own
// environment ($CONDUCTOR_RUNNER_TOKEN), which the runner blanks before any
// script starts (runner/token.ts): never on a command line.
import { type ChildProcess, spawn } from 'node:child_process';
import { log } from '../log.ts';
import * as z from '../zod.ts';
import type { PoolRow } from './pools.ts';
import { LaunchError, type LaunchSpec, type RunnerProvider } from './provider.ts';

/** A process pool's settings (docs/runner.md, "Providers"). */
export const ProcessSettingsSchema = z.strictObject({
  /** shell (default) or docker. */
  executor: z.optional(z.enum(['shell', 'docker'])),
  /** A launched runner that claims nothing within this long exits. Default 60. */
  idle_limit_s: z.optional(z.number().check(z.int(), z.gte(1), z.lte(3600))),
  /** The shell executor's scripts run as this user (the runner must be root). */
  run_as: z.optional(z.string().check(z.minLength(1), z.maxLength(64))),
  /** The shell executor's scripts run as the runner's own user. */
  same_user: z.optional(z.boolean()),
  /** The docker executor's image for tasks that name none. */
  default_image: z.optional(z.string().check(z.minLength(1), z.maxLength(500))),
  /** Where task workspaces are made. */
  workdir: z.optional(z.string().check(z.minLength(1), z.maxLength(1000))),
  /** Where the runner reaches the control plane; default: the local server's address. */
  url: z.optional(z.string().check(z.url())),
});
export type ProcessSettings = z.infer<typeof ProcessSettingsSchema>;

export const PROCESS_IDLE_LIMIT_S = 60;

export class ProcessProvider implements RunnerProvider {
  readonly settings = ProcessSettingsSchema;
  private readonly children = new Map<string, ChildProcess>();
  /**
   * Told when a runner it started has exited (the local stack ends the
   * launch then, rather than at the next sweep: its room under the pool's
   * max is free at once).
   */
  onExit: ((launchId: string, ref: string) => void) | undefined;

  /**
   * `command`: how to start the reference runner (e.g. node --import tsx
   * scripts/runner.ts), given the runner's flags after it.
   */
  constructor(
    private readonly command: string[],
    private readonly env: NodeJS.ProcessEnv = process.env,
  ) {}

  async launch(spec: LaunchSpec): Promise<string> {
    const s = spec.pool.settings as ProcessSettings;
    const args = [
      ...this.command.slice(1),
      '--url',
      spec.url,
      '--once',
      '--idle-limit-s',
      String(s.idle_limit_s ?? PROCESS_IDLE_LIMIT_S),
      '--executor',
      s.executor ?? 'shell',
    ];
    if (spec.pool.trust === 'untrusted') args.push('--untrusted');
    if (s.run_as) args.push('--run-as', s.run_as);
    if (s.same_user) args.push('--same-user');
    if (s.default_image) args.push('--default-image', s.default_image);
    if (s.workdir) args.push('--workdir', s.workdir);
    const { CONDUCTOR_RUNNER_TOKEN: _, ...inherited } = this.env;
    let child: ChildProcess;
    try {
      child = spawn(this.command[0]!, args, {
        env: { ...inherited, CONDUCTOR_RUNNER_TOKEN: spec.token },
        stdio: ['ignore', 'ignore', 'pipe'],
      });
    } catch (err) {
      throw new LaunchError(`could not start a runner process: ${String(err)}`, true, {
        cause: err,
      });
    }
    const started = await new Promise<number>((done, fail) => {
      child.once('spawn', () => done(child.pid!));
      child.once('error', (err) =>
        fail(new LaunchError(`could not start a runner process: ${err.message}`, true)),
      );
    });
    const ref = `pid:${started}`;
    this.children.set(ref, child);
    // The runner's own lines (JSON on stderr) go to this process's log, marked.
    let tail = '';
    child.stderr?.setEncoding('utf8');
    child.stderr?.on('data', (chunk: string) => {
      tail = (tail + chunk).slice(-4000);
    });
    child.once('exit', (code, signal) => {
      this.children.delete(ref);
      this.onExit?.(spec.launchId, ref);
      const level = code === 0 ? 'info' : 'warn';
      log(level, 'a launched runner exited', {
        pool: spec.pool.name,
        launch_id: spec.launchId,
        pid: started,
        code,
        signal,
        ...(code === 0 ? {} : { tail: tail.slice(-1000) }),
      });
    });
    return ref;
  }

  async running(_pool: PoolRow, refs: string[]): Promise<Set<string>> {
    return new Set(refs.filter((r) => this.children.has(r)));
  }

  async stop(_pool: PoolRow, ref: string): Promise<void> {
    this.children.get(ref)?.kill('SIGTERM');
  }

  /** The runners this provider started that still run (pids). */
  pids(): number[] {
    return [...this.children.values()].map((c) => c.pid!).filter(Boolean);
  }

  /** Stops every runner it started (SIGTERM: each gives its task back) and waits for them. */
  async stopAll(timeoutMs = 45_000): Promise<void> {
    const all = [...this.children.values()];
    await Promise.all(
      all.map(
        (c) =>
          new Promise<void>((done) => {
            if (c.exitCode !== null || c.signalCode !== null) return done();
            const kill = setTimeout(() => c.kill('SIGKILL'), timeoutMs);
            c.once('exit', () => {
              clearTimeout(kill);
              done();
            });
            c.kill('SIGTERM');
          }),
      ),
    );
  }
}
