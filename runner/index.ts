// The reference runner: polls the control plane for tasks and runs them.
//   const runner = await startRunner({ url, token });
//   ...
//   await runner.stop(); // as on SIGTERM: finish within the grace period, give back the rest
import { chmod, mkdir } from 'node:fs/promises';
import { tmpdir, userInfo } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { log as defaultLog } from '../lib/log.ts';
import { Backoff, pause } from './backoff.ts';
import { PushChannel } from './channel.ts';
import {
  HttpStatusError,
  isRetryable,
  MalformedTaskError,
  newClaimKey,
  RunnerClient,
  retryDelay,
} from './client.ts';
import { scriptEnvironment, toolEnvironment } from './env.ts';
import type { Logger, RunnerEvent } from './events.ts';
import { dockerExecutor, type Executor, type ExecutorKind, shellExecutor } from './executor.ts';
import { Leftovers } from './leftovers.ts';
import { BUILD_USER, ensureUser, type RunAs, resolveRunAs } from './runas.ts';
import { TaskRun } from './task.ts';
import { TOKEN_VARIABLE } from './token.ts';
import { RUNNER_VERSION } from './version.ts';

export { HttpStatusError, RunnerClient } from './client.ts';
export type { Logger, LogLevel, RunnerEvent, TaskRef } from './events.ts';
export { containerName, type DockerRun, dockerRunArgs, type ExecutorKind } from './executor.ts';
export type { Task } from './protocol.ts';

export interface RunnerOptions {
  /** The control plane's base URL, e.g. http://127.0.0.1:8080. */
  url: string;
  /** The worker token (from `POST /v1/workers`). */
  token: string;
  /** The file the token was read from; with `runAs`, the runner refuses to start if that user can read it. */
  tokenFile?: string;
  /**
   * The shell executor's scripts run as this user (a name or a uid): the
   * runner must be root. Without it (and without `sameUser`), a root runner's
   * scripts run as `buildUser`. Another uid is the only way the shell
   * executor keeps the worker token from scripts (docs/runner.md).
   */
  runAs?: string;
  /**
   * The shell executor's scripts run as the runner's own user, even as root:
   * they can read the worker token. Only when asked for (`--same-user`).
   */
  sameUser?: boolean;
  /**
   * The user a root runner's shell scripts run as when neither `runAs` nor
   * `sameUser` is given; made (useradd) when the machine has none. Default
   * conductor-build.
   */
  buildUser?: string;
  /**
   * The worker's token was registered untrusted: the runner refuses trusted
   * tasks, and refuses to start with scripts under its own uid.
   */
  untrusted?: boolean;
  /** Claims until it gets one task, runs it, and stops (`--once`). */
  once?: boolean;
  /**
   * With `once`: stops (exit 0) when no task was claimed within this long
   * (`--idle-limit-s`): a runner a pool launched for a task another runner
   * took does not wait for ever.
   */
  idleLimitMs?: number;
  /** Narrows the worker's registered labels; unset claims with all of them. */
  labels?: string[];
  /** Tasks run at once. Default 1. */
  concurrency?: number;
  /** Where task workspaces are made (and removed). Default: <tmpdir>/conductor-runner. */
  workdir?: string;
  /** Default 'shell'. 'docker' needs a Docker engine that answers `docker info`. */
  executor?: ExecutorKind;
  /** The image of tasks that name none, with the docker executor. Default debian:bookworm-slim. */
  defaultImage?: string;
  /** The docker CLI. Default 'docker'. */
  dockerCommand?: string;
  /** The longest wait between two claims that found nothing. Default 10 s. */
  pollMaxMs?: number;
  /** The first wait after a claim that found nothing. Default 500 ms. */
  pollMinMs?: number;
  /**
   * How long one claim asks the control plane to wait for a task (a long
   * poll, `?wait=N`, at most 25 s); 0 only polls. Where the control plane
   * waits, an empty answer is followed by the next claim at once; where it
   * answers at once (no channel, or the channel is down), the runner polls
   * with the backoff above. Default 25 s.
   */
  claimWaitS?: number;
  /**
   * With the push channel up (offered by the control plane on AWS), the
   * longest wait between two claims: what a lost hint costs at most.
   * Default 300 s. 0 never uses the channel.
   */
  channelPollMs?: number;
  /** How long `stop()` lets running tasks finish before giving them back. Default 30 s. */
  graceMs?: number;
  /** Between SIGTERM and SIGKILL when a script is stopped. Default 5 s. */
  killGraceMs?: number;
  /** How long one HTTP call may take. Default 30 s. */
  httpTimeoutMs?: number;
  /** How long a completion is retried while the control plane does not answer. Default 60 s. */
  completeRetryMs?: number;
  /** Log chunks go out at least this often. Default 1 s. */
  logFlushMs?: number;
  /** …or as soon as this many bytes wait, and no chunk is larger. Default 64 KiB. */
  logChunkBytes?: number;
  /**
   * The runner's environment. git and the docker CLI run with it (sanitised:
   * toolEnvironment); a script on the host takes only PATH, LANG, LC_ALL and
   * TZ from it (scriptEnvironment). Default process.env.
   */
  env?: NodeJS.ProcessEnv;
  /** Task started, log chunk sent, task finished. */
  onEvent?: (event: RunnerEvent) => void;
  /** The runner's own structured lines. Default: JSON lines on stderr. */
  log?: Logger;
  /** Replaces the global fetch (tests inject failures with it). */
  fetch?: typeof fetch;
}

export interface Runner {
  /**
   * Stops claiming, lets running tasks finish for `graceMs` (default: the
   * runner's), then stops the rest and gives them back as transient failures.
   * Calling it again with a shorter grace shortens the wait. Resolves once
   * everything is reported; never rejects.
   */
  stop(opts?: { graceMs?: number }): Promise<void>;
  /** Resolves when the runner has stopped; rejects when it stopped on an error (a refused token). */
  readonly done: Promise<void>;
  /** The tasks running now. */
  running(): number;
  /** Whether the push channel is up (the control plane offered it, and the socket is open). */
  channelUp(): boolean;
}

/**
 * Why these options cannot run together, or undefined when they can. `root`:
 * whether the runner runs as root (then its shell scripts run as another
 * user unless `sameUser` is given).
 */
export function optionConflict(
  o: Pick<
    RunnerOptions,
    'executor' | 'runAs' | 'sameUser' | 'untrusted' | 'once' | 'concurrency' | 'idleLimitMs'
  >,
  root = process.getuid?.() === 0,
): string | undefined {
  const shell = (o.executor ?? 'shell') === 'shell';
  if (o.runAs && o.sameUser) return '--run-as and --same-user contradict each other: give one';
  if (o.runAs && !shell) {
    return '--run-as is for the shell executor; the docker executor runs scripts in containers';
  }
  if (o.sameUser && !shell) {
    return '--same-user is for the shell executor; the docker executor runs scripts in containers';
  }
  if (o.untrusted && shell && (o.sameUser || (!o.runAs && !root))) {
    return `--untrusted refuses the shell executor with scripts under the runner's own uid: they can read its worker token (use --executor docker, --run-as USER, or start the runner as root without --same-user, so that scripts run as ${BUILD_USER})`;
  }
  if (o.once && (o.concurrency ?? 1) > 1)
    return '--once runs one task: --concurrency does not apply';
  if (o.idleLimitMs !== undefined && !o.once)
    return '--idle-limit-s is for --once: a runner that keeps polling has no idle limit';
  return undefined;
}

/**
 * A claim's refusal, saying what to do about it where the control plane's
 * answer alone does not: a 401 is the same for every token it refuses (it
 * never tells a caller which tokens exist), so the runner lists the causes.
 */
export function explainRefusal(err: unknown, o: Pick<RunnerOptions, 'url' | 'tokenFile'>): unknown {
  if (!(err instanceof HttpStatusError)) return err;
  if (err.status === 401) {
    const where = o.tokenFile ? `the file --token-file ${o.tokenFile}` : `$${TOKEN_VARIABLE}`;
    return new Error(
      `the control plane refused the worker token (${err.message}): it was revoked, it is not a worker token (an admin token, or another control plane's), or it is an ephemeral worker's that has made its one claim. Check the token in ${where}, and that its worker is still listed by \`conductor workers\` (GET /v1/workers); if it is not, register one (\`conductor worker create\`) and put the new token there`,
      { cause: err },
    );
  }
  if (err.status === 404) {
    return new Error(
      `${err.message}: is ${o.url} the control plane's base URL (the one \`npm start\` or the deployment printed)?`,
      { cause: err },
    );
  }
  return err;
}

/** The user the runner itself runs as: whom scripts run as without runAs. */
function currentUser(env: NodeJS.ProcessEnv): { name: string; home: string } {
  try {
    const me = userInfo();
    return { name: me.username, home: env.HOME || me.homedir };
  } catch {
    // A uid with no passwd entry (a container started with --user 1234).
    return { name: String(process.getuid?.() ?? ''), home: env.HOME || '/' };
  }
}

/** Makes `dir` and the directories above it that are missing; those it made are 0711, so another user may pass through. */
async function makeWorkdir(dir: string): Promise<void> {
  const first = await mkdir(dir, { recursive: true });
  if (first === undefined) return;
  // The default, <tmpdir>/conductor-runner, under umask 077 would otherwise
  // shut out the user scripts run as.
  for (let d = dir; ; d = dirname(d)) {
    await chmod(d, 0o711);
    if (d === first) break;
  }
}

/**
 * Starts a runner; rejects at once when it cannot run (no Docker engine for
 * --executor docker, a --run-as user scripts cannot run as, a build user
 * that cannot be made).
 */
export async function startRunner(options: RunnerOptions): Promise<Runner> {
  if (!options.url) throw new Error('the control plane URL is required');
  if (!options.token) throw new Error('the worker token is required');
  const concurrency = options.concurrency ?? 1;
  if (!Number.isInteger(concurrency) || concurrency < 1) {
    throw new Error(`concurrency must be a whole number of at least 1, got ${concurrency}`);
  }
  const root = process.getuid?.() === 0;
  const conflict = optionConflict(options, root);
  if (conflict) throw new Error(conflict);
  const log = options.log ?? defaultLog;
  const env = options.env ?? process.env;
  const hidden = [options.token, options.url.replace(/\/+$/, '')];
  const toolEnv = toolEnvironment(env, hidden);
  const workdir = resolve(options.workdir ?? join(tmpdir(), 'conductor-runner'));
  await makeWorkdir(workdir);
  const shell = (options.executor ?? 'shell') === 'shell';
  const tokenFile = options.tokenFile ? { tokenFile: resolve(options.tokenFile) } : {};
  let runAs: RunAs | undefined;
  if (options.runAs) {
    runAs = await resolveRunAs(options.runAs, { workdir, env: toolEnv, ...tokenFile });
  } else if (shell && root && !options.sameUser) {
    // Isolation by default: a script under the runner's uid could read the
    // worker token from the runner's memory and claim other projects' tasks.
    const name = options.buildUser ?? BUILD_USER;
    await ensureUser(name, toolEnv, (line) => log('info', line, { user: name }));
    runAs = await resolveRunAs(name, {
      workdir,
      env: toolEnv,
      ...tokenFile,
      label: `the build user ${name} (a root runner's scripts run as it; --run-as USER or --same-user to change that)`,
    });
  }
  let leftovers: Leftovers | undefined;
  if (options.executor === 'docker') {
    leftovers = new Leftovers(
      workdir,
      { command: options.dockerCommand ?? 'docker', env: toolEnv },
      log,
    );
  }
  const executor: Executor = leftovers
    ? await dockerExecutor({
        defaultImage: options.defaultImage ?? 'debian:bookworm-slim',
        env: toolEnv,
        labels: (taskId) => leftovers.labels(taskId),
        ...(options.dockerCommand ? { command: options.dockerCommand } : {}),
      })
    : shellExecutor({
        env: scriptEnvironment(env, runAs ?? currentUser(env), hidden),
        ...(runAs ? { runAs } : {}),
      });
  if (leftovers) {
    // Before the first claim: what a killed runner left may hold names and
    // addresses the new tasks need.
    await leftovers.removeDead();
    await leftovers.register();
  }

  const runner = new PollingRunner(options, {
    client: new RunnerClient({
      url: options.url,
      token: options.token,
      timeoutMs: options.httpTimeoutMs ?? 30_000,
      ...(options.fetch ? { fetch: options.fetch } : {}),
    }),
    executor,
    workdir,
    toolEnv,
    concurrency,
    log,
    ...(leftovers ? { leftovers } : {}),
  });
  log('info', 'runner started', {
    version: RUNNER_VERSION,
    url: options.url,
    labels: options.labels ?? null,
    concurrency,
    executor: executor.kind,
    workdir,
    run_as: runAs?.name ?? null,
    untrusted: options.untrusted ?? false,
    once: options.once ?? false,
    idle_limit_s: options.idleLimitMs === undefined ? null : options.idleLimitMs / 1000,
  });
  if (executor.kind === 'shell' && !runAs) {
    const me = currentUser(env).name;
    log(
      'warn',
      options.sameUser
        ? `--same-user: scripts run as the runner's own user (${me}): they can read its worker token${root ? ' and all else on this host' : ''} (docs/runner.md#keeping-the-token-from-scripts)`
        : `scripts run as the runner's own user (${me}): they can read its worker token; start the runner as root, so that they run as ${BUILD_USER}, or give --run-as USER (docs/runner.md#keeping-the-token-from-scripts)`,
    );
  }
  return runner;
}

interface Parts {
  client: RunnerClient;
  executor: Executor;
  workdir: string;
  toolEnv: Record<string, string>;
  concurrency: number;
  log: Logger;
  /** The docker executor's record in the work directory, dropped when the runner stops. */
  leftovers?: Leftovers;
}

// A long poll answered empty this close to its wait was waited out by the
// control plane (its clock and ours, and the round trip, differ a little).
const LONG_POLL_SLACK_MS = 1_000;

class PollingRunner implements Runner {
  readonly done: Promise<void>;
  private readonly active = new Set<TaskRun>();
  private stopping = false;
  private givingBack = false;
  private fatal: unknown;
  private readonly idle = new AbortController();
  private slotFreed: (() => void) | undefined;
  private graceDeadline = Number.POSITIVE_INFINITY;
  private graceTimer: NodeJS.Timeout | undefined;
  /** With `once`: the one task, once claimed. */
  private only: TaskRun | undefined;
  /** The push channel, while the claim loop runs (tests look at whether it is up). */
  channel: PushChannel | undefined;

  constructor(
    private readonly options: RunnerOptions,
    private readonly parts: Parts,
  ) {
    this.done = this.loop();
    // Whoever only calls stop() must not meet an unhandled rejection.
    this.done.catch(() => {});
  }

  channelUp(): boolean {
    return this.channel?.up ?? false;
  }

  running(): number {
    return this.active.size;
  }

  stop(opts: { graceMs?: number } = {}): Promise<void> {
    const graceMs = opts.graceMs ?? this.options.graceMs ?? 30_000;
    if (!this.stopping) {
      this.stopping = true;
      this.parts.log('info', 'runner stopping: no new tasks', {
        running: this.active.size,
        grace_s: graceMs / 1000,
      });
    }
    this.idle.abort();
    this.slotFreed?.();
    const deadline = Date.now() + graceMs;
    if (deadline < this.graceDeadline) {
      this.graceDeadline = deadline;
      clearTimeout(this.graceTimer);
      this.graceTimer = setTimeout(() => this.giveBack(), graceMs);
    }
    return this.done.catch(() => {});
  }

  private giveBack(): void {
    this.givingBack = true;
    if (this.active.size > 0) {
      this.parts.log('warn', 'grace period over: giving back the tasks still running', {
        running: this.active.size,
      });
    }
    for (const run of this.active) run.stop('shutdown');
  }

  private async loop(): Promise<void> {
    const { client, log, concurrency } = this.parts;
    const backoff = new Backoff(this.options.pollMinMs ?? 500, this.options.pollMaxMs ?? 10_000);
    let failing = 0;
    // Kept from a claim that got no answer to its repeat: the control plane
    // may have granted the first, and answers the same grant to the same key.
    let claimKey: string | undefined;
    const waitS = Math.min(25, Math.max(0, Math.floor(this.options.claimWaitS ?? 25)));
    // The push channel (where offered): not for a one-claim runner, which
    // is launched for a task already queued.
    const channelPollMs = this.options.channelPollMs ?? 300_000;
    const channel =
      this.options.once || channelPollMs === 0
        ? undefined
        : new PushChannel((level, message, data) => log(level, message, data));
    this.channel = channel;
    const idleUntil =
      this.options.once && this.options.idleLimitMs !== undefined
        ? Date.now() + this.options.idleLimitMs
        : undefined;
    while (!this.stopping && !this.only) {
      if (this.active.size >= concurrency) {
        await new Promise<void>((done) => {
          this.slotFreed = done;
        });
        this.slotFreed = undefined;
        continue;
      }
      try {
        // No abort signal: a claim the control plane has granted must reach
        // us, or its task waits for its lease to expire.
        claimKey ??= newClaimKey();
        const asked = Date.now();
        // A runner with an idle limit waits no longer than what is left of it.
        // With the push channel up, the hint replaces the long poll.
        const pollS = channel?.up
          ? 0
          : idleUntil === undefined
            ? waitS
            : Math.min(waitS, Math.max(0, Math.ceil((idleUntil - asked) / 1000)));
        // A long poll is the one claim stop() cuts short: the control plane
        // stops waiting when the runner hangs up, and gives back a claim it
        // made meanwhile.
        const claimed = await client.claim(this.options.labels, {
          idempotencyKey: claimKey,
          ...(pollS > 0 ? { waitS: pollS, signal: this.idle.signal } : {}),
          ...(channel && !channel.connecting ? { wantChannel: true } : {}),
        });
        claimKey = undefined;
        if (failing > 0) log('info', 'the control plane answers again', { failures: failing });
        failing = 0;
        if (!claimed) {
          if (idleUntil !== undefined && Date.now() >= idleUntil) {
            log('info', 'idle limit reached: no task claimed; the runner stops', {
              idle_limit_s: (this.options.idleLimitMs ?? 0) / 1000,
            });
            break;
          }
          if (channel && !channel.connecting && client.channelOffer) {
            channel.open(client.channelOffer);
          }
          if (channel?.up) {
            // Told, not polling: claim on a hint, or after channelPollMs
            // all the same (a hint lost costs at most that).
            const why = await channel.wait(channelPollMs, this.idle.signal);
            if (why !== 'down') {
              backoff.reset();
              continue;
            }
          }
          // The control plane waited out the long poll: ask again at once.
          // It answered sooner: it offers no wait (or its channel is down),
          // so poll with the backoff.
          if (pollS > 0 && Date.now() - asked >= pollS * 1000 - LONG_POLL_SLACK_MS) continue;
          const wait = backoff.next();
          await pause(
            idleUntil === undefined ? wait : Math.max(0, Math.min(wait, idleUntil - Date.now())),
            this.idle.signal,
          );
          continue;
        }
        backoff.reset();
        const run = new TaskRun(claimed.task, this.taskContext(), claimed.serverTime);
        if (this.options.once) this.only = run;
        this.start(run);
      } catch (err) {
        // A long poll cut short by stop().
        if (this.stopping && !(err instanceof MalformedTaskError)) break;
        if (err instanceof MalformedTaskError) {
          // Answered (a 200): the next claim is a new one.
          claimKey = undefined;
          await this.refuse(err);
          if (this.options.once) {
            this.fatal = err;
            break;
          }
          continue;
        }
        if (!isRetryable(err)) {
          // A refused token, unknown labels, a wrong URL: polling on changes nothing.
          // The remedy (explainRefusal) is said once, by whoever reads the
          // runner's end (conductor-runner prints it as it exits); the log
          // line keeps the control plane's own answer.
          const fatal = explainRefusal(err, this.options);
          log('error', 'the control plane refused the claim; the runner stops', { err });
          this.fatal = fatal;
          this.stopping = true;
          break;
        }
        if (failing++ === 0) log('warn', 'claim failed; retrying with backoff', { err });
        await pause(retryDelay(err, backoff), this.idle.signal);
      }
    }
    channel?.close();
    while (this.active.size > 0) await Promise.race([...this.active].map((r) => r.done));
    clearTimeout(this.graceTimer);
    await this.parts.leftovers?.unregister().catch(() => {});
    if (this.only && !this.only.reported && !this.fatal) {
      this.fatal = new Error(
        `the outcome of task ${this.only.task.id} could not be reported to the control plane`,
      );
    }
    log('info', 'runner stopped');
    if (this.fatal) throw this.fatal;
  }

  private start(run: TaskRun): void {
    this.active.add(run);
    run.done = run.run().finally(() => {
      this.active.delete(run);
      this.slotFreed?.();
    });
    // Claimed after the grace period ran out (the claim was on its way).
    if (this.givingBack) run.stop('shutdown');
  }

  /** A task this runner cannot read: fail it, so it does not wait for its lease to expire. */
  private async refuse(err: MalformedTaskError): Promise<void> {
    this.parts.log('error', 'claimed a task that cannot be read', { err, task_id: err.taskId });
    if (!err.taskId || !err.leaseId) return;
    await this.parts.client
      .complete(
        err.taskId,
        { lease_id: err.leaseId, outcome: 'failed', transient: false, error: err.message },
        { retryForMs: this.options.completeRetryMs ?? 60_000 },
      )
      .catch((e) => this.parts.log('error', 'could not fail the unreadable task', { err: e }));
  }

  private taskContext() {
    const o = this.options;
    return {
      client: this.parts.client,
      executor: this.parts.executor,
      workdir: this.parts.workdir,
      toolEnv: this.parts.toolEnv,
      masks: [o.token],
      untrusted: o.untrusted ?? false,
      onTrustMismatch: (reason: string) => {
        if (this.fatal) return;
        this.parts.log('error', 'a task did not match --untrusted; the runner stops', {
          err: reason,
        });
        this.fatal = new Error(reason);
        // No new claims; the task is completed (given back) before the loop ends.
        this.stop();
      },
      killGraceMs: o.killGraceMs ?? 5_000,
      logFlushMs: o.logFlushMs ?? 1_000,
      logChunkBytes: o.logChunkBytes ?? 64 * 1024,
      httpTimeoutMs: o.httpTimeoutMs ?? 30_000,
      completeRetryMs: o.completeRetryMs ?? 60_000,
      log: this.parts.log,
      emit: (event: RunnerEvent) => {
        try {
          o.onEvent?.(event);
        } catch (err) {
          this.parts.log('warn', 'onEvent threw', { err });
        }
      },
    };
  }
}
