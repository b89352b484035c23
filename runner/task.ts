// One claimed attempt of a task, from its workspace to its reported outcome:
// fetch the commit, run the script, stream the log, heartbeat the lease, stop
// on cancel, timeout, shutdown or a lost lease, then complete.
import { mkdir, mkdtemp } from 'node:fs/promises';
import { join } from 'node:path';
import { formatDuration } from '../lib/duration.ts';
import { Masker } from '../lib/masking.ts';
import {
  restoreNeededArtifacts,
  type StorageContext,
  StorageError,
  uploadArtifacts,
} from './artifacts.ts';
import { Backoff } from './backoff.ts';
import { TaskCaches } from './cache.ts';
import { HttpStatusError, type RunnerClient } from './client.ts';
import type { Logger, RunnerEvent, TaskRef } from './events.ts';
import type { Execution, Executor } from './executor.ts';
import { basicCredential, CheckoutError, checkout, redactUrl } from './git.ts';
import { LogStream } from './logstream.ts';
import { MAX_OUTPUTS_BYTES, OutputsError, parseOutputs } from './outputs.ts';
import type { Exit } from './process.ts';
import type { Completion, Outcome, Task } from './protocol.ts';
import { uploadReports } from './reports.ts';
import { parseLineFile, scriptLines } from './script.ts';
import { ServiceError, type TaskServices } from './services.ts';
import { readTaskFile, TaskFileError } from './taskfile.ts';

/** What a task run needs from the runner that claimed it. */
export interface TaskRunContext {
  client: RunnerClient;
  executor: Executor;
  workdir: string;
  /** The environment git runs with (see toolEnvironment). */
  toolEnv: Record<string, string>;
  /** Values never to appear in a log or an error (the worker token), beside the task's secrets. */
  masks: string[];
  /** The runner was started with --untrusted: it runs only untrusted tasks. */
  untrusted: boolean;
  /**
   * Called when a task's trust does not match --untrusted: the runner's flag
   * disagrees with its worker's registration, so it stops claiming (every
   * task it would claim would be given back the same way).
   */
  onTrustMismatch?: (reason: string) => void;
  /** Between SIGTERM and SIGKILL when a script is stopped. */
  killGraceMs: number;
  logFlushMs: number;
  logChunkBytes: number;
  httpTimeoutMs: number;
  /** How long a completion is retried while the control plane does not answer. */
  completeRetryMs: number;
  emit: (event: RunnerEvent) => void;
  log: Logger;
}

/** Why a task was stopped before its script ended on its own. */
export type StopReason = 'cancel' | 'timeout' | 'shutdown' | 'connection-lost' | 'lease-lost';

interface Result {
  outcome: Outcome;
  exitCode: number | null;
  transient: boolean;
  error: string | null;
  outputs?: Record<string, string>;
}

const NOTES: Record<Exclude<StopReason, 'lease-lost' | 'timeout'>, string> = {
  cancel: 'the job was cancelled: stopping the script',
  shutdown: 'the runner is shutting down: stopping the script and giving the task back',
  'connection-lost': 'the control plane has not answered for a whole lease: stopping the script',
};

/** How long the final log upload may take before the completion is sent anyway. */
const FINAL_FLUSH_MS = 30_000;

// The file the script records its last line in holds a number.
const MAX_LINE_FILE_BYTES = 1024;
const LINE_FILE = "the script's line file (beside $CONDUCTOR_OUTPUT)";

/**
 * Why a runner started with or without --untrusted must not run a task the
 * control plane says is (un)trusted, or undefined when it may. A control
 * plane that does not say (`trusted` absent) is taken at its word.
 */
export function trustRefusal(trusted: boolean | undefined, untrusted: boolean): string | undefined {
  if (trusted === true && untrusted) {
    return 'this runner was started with --untrusted and was handed a trusted task: a runner for untrusted code never runs trusted work (its secrets and repository token would meet what untrusted scripts left on this host); register its worker untrusted, or start it without --untrusted';
  }
  if (trusted === false && !untrusted) {
    return 'this runner was started without --untrusted and was handed an untrusted task: untrusted code runs only on runners started with --untrusted; start it with --untrusted if its worker is registered untrusted';
  }
  return undefined;
}

/**
 * Why this runner cannot run a task's services, or undefined when it can (or
 * the task has none). Not transient: no attempt on this runner would do better.
 */
export function servicesRefusal(task: Task, executor: Executor): string | undefined {
  if (task.services.length === 0 || executor.services) return undefined;
  const names = task.services.map((s) => s.name).join(', ');
  return `this task has services (${names}), which need the docker executor; this runner uses the ${executor.kind} executor (give the task a label that only runners started with --executor docker have)`;
}

/** One attempt of a task on this runner. */
export class TaskRun {
  /** Settles when `run()` has finished; set by whoever starts it. */
  done: Promise<void> = Promise.resolve();
  /** Whether the control plane took the attempt's outcome; set when `run()` has finished. */
  reported = false;
  private stopReason: StopReason | undefined;
  private scriptEnded = false;
  private finished = false;
  private execution: Execution | undefined;
  private services: TaskServices | undefined;
  /** Artifacts and caches: set once they are restored, for the uploads after the script. */
  private storage: { ctx: StorageContext; caches: TaskCaches } | undefined;
  private readonly abort = new AbortController();
  private readonly logs: LogStream;
  private readonly masker: Masker;
  private readonly startedAt = Date.now();
  private leaseExpires = 0;
  private heartbeatTimer: NodeJS.Timeout | undefined;
  private timeoutTimer: NodeJS.Timeout | undefined;
  private conflicts = 0;
  private heartbeating = false;
  private readonly heartbeatBackoff = new Backoff(250, 5_000);
  private readonly ref: TaskRef;

  constructor(
    readonly task: Task,
    private readonly ctx: TaskRunContext,
    claimServerTime: number | undefined,
  ) {
    this.ref = { task_id: task.id, job_id: task.job_id, name: task.name, attempt: task.attempt };
    this.masker = new Masker([
      ...ctx.masks,
      ...Object.values(task.secrets),
      // The clone token, and the header git sends it in (should git print it).
      ...(task.repo.token ? [task.repo.token, basicCredential(task.repo.token)] : []),
    ]);
    this.logs = new LogStream(
      (offset, data, signal) =>
        ctx.client.appendLog(task.id, task.lease_id, offset, data, { signal }).catch((err) => {
          // Refused for the lease (no size in the answer): ask about the lease
          // now rather than retrying until the next heartbeat.
          if (err instanceof HttpStatusError && err.status === 409) this.heartbeatSoon();
          throw err;
        }),
      {
        flushMs: ctx.logFlushMs,
        chunkBytes: ctx.logChunkBytes,
        masker: this.masker,
        onSent: (offset, data) => ctx.emit({ type: 'log-chunk', ...this.ref, offset, data }),
        onStopped: (reason) => ctx.log('warn', reason, { task_id: task.id }),
      },
    );
    this.noteLease(Date.parse(task.lease_expires_at), claimServerTime);
  }

  /**
   * Stops the task for `reason`; the first reason wins, but for a lost lease:
   * whatever the task was stopping for, once the attempt is no longer ours
   * nothing more of it is uploaded or reported.
   */
  stop(reason: StopReason): void {
    if (this.finished || this.stopReason === 'lease-lost') return;
    if (reason === 'lease-lost' && this.stopReason) {
      this.stopReason = reason;
      this.logs.cancel('the lease was lost');
      return;
    }
    if (this.stopReason) return;
    // Once the script is over, only a lost lease changes anything: the rest
    // of the work is reporting what already happened.
    if (this.scriptEnded && reason !== 'lease-lost') return;
    this.stopReason = reason;
    this.abort.abort();
    if (reason === 'lease-lost') this.logs.cancel('the lease was lost');
    else if (reason === 'timeout') {
      this.note(`timed out after ${formatDuration(this.task.timeout_s)}: stopping the script`);
    } else this.note(NOTES[reason]);
    this.execution?.stop(this.ctx.killGraceMs);
  }

  /** Runs the attempt to its end; never rejects. */
  async run(): Promise<void> {
    const { task, ctx } = this;
    ctx.log('info', 'task started', {
      ...this.ref,
      max_attempts: task.max_attempts,
      lease_id: task.lease_id,
    });
    ctx.emit({ type: 'task-started', ...this.ref, max_attempts: task.max_attempts });
    this.scheduleHeartbeat(this.heartbeatInterval());
    const timeoutMs = task.timeout_s * 1000 - (Date.now() - this.startedAt);
    this.timeoutTimer = setTimeout(() => this.stop('timeout'), Math.max(0, timeoutMs));

    let taskDir: string | undefined;
    let result: Result;
    try {
      const mismatch = trustRefusal(task.trusted, ctx.untrusted);
      const refusal = mismatch ?? servicesRefusal(task, ctx.executor);
      if (mismatch) {
        // Given back (transient: queued again while attempts remain) for a
        // runner whose flag matches its registration, and this one stops.
        const error = `${mismatch}; given back, and this runner stops`;
        this.note(error);
        result = { outcome: 'failed', exitCode: null, transient: true, error };
        ctx.onTrustMismatch?.(mismatch);
      } else if (refusal) {
        this.note(refusal);
        // Not transient: no other attempt on a runner like this one would do better.
        result = { outcome: 'failed', exitCode: null, transient: false, error: refusal };
      } else {
        let why = '';
        taskDir = await mkdtemp(join(ctx.workdir, `${task.id.slice(0, 8)}-${task.attempt}-`)).catch(
          (err: Error) => {
            why = err.message;
            return undefined;
          },
        );
        result = taskDir
          ? await this.execute(taskDir)
          : this.infrastructure(`could not make a workspace: ${why}`);
        result = await this.storeAfter(result);
      }
    } catch (err) {
      result = {
        outcome: 'failed',
        exitCode: null,
        transient: true,
        error: `the runner failed to run the task: ${err instanceof Error ? err.message : err}`,
      };
      if (this.stopReason) result = this.stoppedResult(this.stopReason, null) ?? result;
    }
    clearTimeout(this.timeoutTimer);
    // An error can quote a script line or an output line, and so a secret;
    // an output can hold one too (a URL with a token in it, say).
    if (result.error !== null) result.error = this.masker.mask(result.error);
    if (result.outputs) {
      result.outputs = Object.fromEntries(
        Object.entries(result.outputs).map(([name, value]) => [name, this.masker.mask(value)]),
      );
    }

    // The services' logs close the task's log, masked by the log stream like the script's.
    if (this.services && this.stopReason !== 'lease-lost') {
      this.logs.write(await this.services.logs());
    }
    await this.logs.close(FINAL_FLUSH_MS);
    let answer: { state: string; job_state: string | null } | undefined;
    if (this.stopReason !== 'lease-lost') answer = await this.report(result);
    this.reported = answer !== undefined;
    this.finished = true;
    clearTimeout(this.heartbeatTimer);
    // After the report, which need not wait for Docker: whatever the outcome,
    // nothing of the task's is left running.
    await this.services?.remove((message, fields) => ctx.log('warn', message, fields));
    if (taskDir) {
      await ctx.executor.remove(taskDir).catch((err) =>
        ctx.log('warn', 'could not remove the workspace', {
          task_id: task.id,
          dir: taskDir,
          err,
        }),
      );
    }

    const outcome = answer ? result.outcome : 'lost';
    const finished = {
      ...this.ref,
      outcome,
      state: answer?.state ?? null,
      job_state: answer?.job_state ?? null,
      exit_code: result.exitCode,
      transient: result.transient,
      error: result.error,
      duration_ms: Date.now() - this.startedAt,
    } as const;
    ctx.log(outcome === 'success' ? 'info' : 'warn', 'task finished', finished);
    ctx.emit({ type: 'task-finished', ...finished });
  }

  private async execute(taskDir: string): Promise<Result> {
    const { task, ctx } = this;
    const workspace = join(taskDir, 'workspace');
    const metaDir = join(taskDir, 'conductor');
    try {
      await mkdir(workspace);
      await mkdir(metaDir);
    } catch (err) {
      return this.infrastructure(`could not make the workspace: ${(err as Error).message}`);
    }
    if (task.image && ctx.executor.kind === 'shell') {
      this.note(
        `the shell executor ignores the image "${task.image}": the script runs on this host`,
      );
    }
    if (this.stopReason) return this.stoppedResult(this.stopReason, null)!;

    try {
      await checkout(task.repo, workspace, { env: ctx.toolEnv, signal: this.abort.signal });
    } catch (err) {
      if (this.stopReason) return this.stoppedResult(this.stopReason, null)!;
      if (err instanceof CheckoutError && err.output) this.logs.write(err.output);
      return this.infrastructure((err as Error).message);
    }
    this.note(`checked out ${task.repo.sha} (${task.repo.ref}) from ${redactUrl(task.repo.url)}`);
    if (this.stopReason) return this.stoppedResult(this.stopReason, null)!;
    const restoreFailed = await this.restoreStorage(taskDir, workspace, metaDir);
    if (restoreFailed) return restoreFailed;
    if (this.stopReason) return this.stoppedResult(this.stopReason, null)!;

    let network: string | undefined;
    if (task.services.length && ctx.executor.services) {
      const services = ctx.executor.services(task);
      // Set before starting: whatever start leaves behind is removed at the end.
      this.services = services;
      try {
        await services.start(this.abort.signal, (text) => this.note(text));
      } catch (err) {
        if (this.stopReason) return this.stoppedResult(this.stopReason, null)!;
        if (!(err instanceof ServiceError)) {
          return this.infrastructure(`could not start the services: ${(err as Error).message}`);
        }
        this.note(err.message);
        return { outcome: 'failed', exitCode: null, transient: err.transient, error: err.message };
      }
      if (this.stopReason) return this.stoppedResult(this.stopReason, null)!;
      network = services.network;
    }

    let execution: Execution;
    try {
      execution = await ctx.executor.start({
        task,
        taskDir,
        workspace,
        metaDir,
        onOutput: (text) => this.logs.write(text),
        onPaused: (resume) => void this.logs.whenDrained().then(resume),
        ...(network ? { network } : {}),
      });
    } catch (err) {
      return this.infrastructure(`could not start the script: ${(err as Error).message}`);
    }
    this.execution = execution;
    // A stop that came while the script was starting.
    if (this.stopReason) execution.stop(ctx.killGraceMs);
    const exit = await execution.exited;
    this.scriptEnded = true;
    if (this.stopReason) return this.stoppedResult(this.stopReason, exit)!;

    if (exit.code === 0) {
      try {
        const text = await readTaskFile(
          execution.outputFile,
          '$CONDUCTOR_OUTPUT',
          MAX_OUTPUTS_BYTES,
        );
        const outputs = parseOutputs(text);
        return { outcome: 'success', exitCode: 0, transient: false, error: null, outputs };
      } catch (err) {
        // Neither error quotes the file: it may hold what a container linked to.
        const message =
          err instanceof OutputsError || err instanceof TaskFileError
            ? err.message
            : `could not read $CONDUCTOR_OUTPUT: ${(err as NodeJS.ErrnoException).code ?? 'failed'}`;
        this.note(message);
        return { outcome: 'failed', exitCode: 0, transient: false, error: message };
      }
    }
    const notStarted = await execution.notStarted(exit);
    if (notStarted) {
      this.note(notStarted.error);
      return { outcome: 'failed', exitCode: exit.code, ...notStarted };
    }
    return {
      outcome: 'failed',
      exitCode: exit.code,
      transient: false,
      error: await this.scriptError(exit, execution.lineFile),
    };
  }

  // ------------------------------------------------------- artifacts, caches

  /**
   * Before the script: the artifacts of the task's needs go to
   * $CONDUCTOR_ARTIFACTS/<task name>/ and its caches are restored. Answers
   * the failed result when the artifacts cannot be had (a cache that cannot
   * be restored is only a miss).
   */
  private async restoreStorage(
    taskDir: string,
    workspace: string,
    metaDir: string,
  ): Promise<Result | undefined> {
    const { task, ctx } = this;
    const artifactsDir = join(metaDir, 'artifacts');
    // The script sees the directory where its executor mounts it.
    task.env = {
      ...task.env,
      CONDUCTOR_ARTIFACTS: ctx.executor.kind === 'docker' ? '/conductor/artifacts' : artifactsDir,
    };
    const storage: StorageContext = {
      client: ctx.client,
      task,
      workspace,
      artifactsDir,
      scratch: taskDir,
      note: (text) => this.note(text),
      signal: this.abort.signal,
      retryForMs: Math.max(ctx.completeRetryMs, 10_000),
    };
    this.storage = { ctx: storage, caches: new TaskCaches(storage) };
    try {
      await restoreNeededArtifacts(storage);
      await this.storage.caches.restore();
    } catch (err) {
      if (this.stopReason) return this.stoppedResult(this.stopReason, null)!;
      const message = `could not restore the artifacts of the needed tasks: ${(err as Error).message}`;
      if (err instanceof StorageError && !err.transient) {
        this.note(message);
        return { outcome: 'failed', exitCode: null, transient: false, error: message };
      }
      return this.infrastructure(message);
    }
    return undefined;
  }

  /**
   * After the script: its test reports are uploaded, its artifacts as `when:` says, and its
   * caches saved when it succeeded. An artifact over a limit fails the task
   * with the limit's message.
   */
  private async storeAfter(result: Result): Promise<Result> {
    const storage = this.storage;
    if (!storage || this.stopReason) return result;
    const scriptRan = result.outcome === 'success' || result.exitCode !== null;
    if (!scriptRan) return result;
    // Test reports, whatever the script's outcome; they never change it.
    if (this.task.reports?.junit.length) {
      try {
        await uploadReports(storage.ctx, this.task.reports.junit);
      } catch (err) {
        if (this.stopReason) return result;
        this.note(`the test reports could not be uploaded: ${(err as Error).message}`);
      }
    }
    const when = this.task.artifacts?.when ?? 'on_success';
    const success = result.outcome === 'success';
    const upload =
      this.task.artifacts &&
      (when === 'always' || (success ? when === 'on_success' : when === 'on_failure'));
    try {
      if (upload) await uploadArtifacts(storage.ctx, this.task.artifacts!.paths);
      if (success) await storage.caches.save();
    } catch (err) {
      if (this.stopReason) return result;
      const message = `the artifacts could not be uploaded: ${(err as Error).message}`;
      this.note(message);
      if (!success) return result;
      const transient = !(err instanceof StorageError) || err.transient;
      return { outcome: 'failed', exitCode: result.exitCode, transient, error: message };
    }
    return result;
  }

  /**
   * Says which line failed and how, from what the script recorded: numbered
   * as the pipeline writes the script, as the shell numbers it in the log.
   */
  private async scriptError(exit: Exit, lineFile: string): Promise<string> {
    const how =
      exit.code === null
        ? `was killed by ${exit.signal ?? 'a signal'}`
        : `exited with ${exit.code}`;
    let recorded: { entry: number; line: number | undefined };
    try {
      recorded = parseLineFile(await readTaskFile(lineFile, LINE_FILE, MAX_LINE_FILE_BYTES, ''));
    } catch (err) {
      const why = err instanceof TaskFileError ? err.message : `${LINE_FILE} could not be read`;
      this.note(why);
      return `the script ${how}; ${why}`;
    }
    const entry = this.task.script[recorded.entry - 1];
    if (entry === undefined) return `the script ${how}`;
    const { first, last } = scriptLines(this.task.script)[recorded.entry - 1]!;
    const lines = entry.replace(/\n$/, '').split('\n');
    const quote = (text: string) => (text.length > 200 ? `${text.slice(0, 200)}…` : text);
    const line = recorded.line;
    if (line !== undefined && line >= first && line <= last) {
      return `line ${line} of the script ${how}: ${quote(lines[line - first]!)}`;
    }
    // A block of lines whose failing line the shell did not say (sh, or `set +e`).
    const where = first === last ? `line ${first}` : `lines ${first}-${last}`;
    return `${where} of the script ${how}: ${quote(lines[0]!)}`;
  }

  private infrastructure(error: string): Result {
    this.note(error);
    return { outcome: 'failed', exitCode: null, transient: true, error };
  }

  private stoppedResult(reason: StopReason, exit: Exit | null): Result | undefined {
    const exitCode = exit?.code ?? null;
    switch (reason) {
      case 'cancel':
        return { outcome: 'cancelled', exitCode, transient: false, error: 'cancelled' };
      case 'timeout':
        return {
          outcome: 'failed',
          exitCode,
          transient: false,
          error: `timed out after ${formatDuration(this.task.timeout_s)}`,
        };
      case 'shutdown':
        return {
          outcome: 'failed',
          exitCode,
          transient: true,
          error: 'the runner shut down before the task finished; given back',
        };
      case 'connection-lost':
        return {
          outcome: 'failed',
          exitCode,
          transient: true,
          error: 'the runner lost its connection to the control plane',
        };
      case 'lease-lost':
        return { outcome: 'failed', exitCode, transient: true, error: 'the lease was lost' };
    }
  }

  /** Completes the attempt; answers the control plane's answer, or undefined if it never came. */
  private async report(
    result: Result,
  ): Promise<{ state: string; job_state: string | null } | undefined> {
    const { task, ctx } = this;
    let body: Completion = {
      lease_id: task.lease_id,
      outcome: result.outcome,
      transient: result.transient,
      ...(result.exitCode === null ? {} : { exit_code: result.exitCode }),
      ...(result.error === null ? {} : { error: result.error.slice(0, 10_000) }),
      ...(result.outputs && Object.keys(result.outputs).length ? { outputs: result.outputs } : {}),
    };
    let conflicts = 0;
    for (;;) {
      try {
        return await ctx.client.complete(task.id, body, { retryForMs: ctx.completeRetryMs });
      } catch (err) {
        // A 409 also answers a transaction that kept losing races: ask once more
        // before taking it for a lost lease.
        if (err instanceof HttpStatusError && err.status === 409 && ++conflicts < 2) continue;
        if (err instanceof HttpStatusError && [400, 413].includes(err.status) && body.outputs) {
          const error = `the control plane refused the outputs: ${err.message}`;
          result.outcome = 'failed';
          result.error = error;
          body = { lease_id: task.lease_id, outcome: 'failed', transient: false, error };
          continue;
        }
        ctx.log('error', 'could not report the outcome of a task', { ...this.ref, err });
        return undefined;
      }
    }
  }

  // ------------------------------------------------------------------ lease

  /** Remembers when the lease ends, judged by the server's clock where it sent one. */
  private noteLease(expiresAt: number, serverTime: number | undefined): void {
    const now = Date.now();
    // The Date header has whole seconds, so the server's clock may be up to a
    // second past it: count the lease a second short.
    const remaining = serverTime === undefined ? expiresAt - now : expiresAt - serverTime - 1_000;
    this.leaseExpires = now + (Number.isNaN(remaining) ? 0 : remaining);
  }

  /** A third of what is left of the lease. */
  private heartbeatInterval(): number {
    return Math.max(100, (this.leaseExpires - Date.now()) / 3);
  }

  /** A heartbeat at once, unless one is on its way. */
  private heartbeatSoon(): void {
    if (this.finished || this.heartbeating) return;
    clearTimeout(this.heartbeatTimer);
    this.scheduleHeartbeat(0);
  }

  private scheduleHeartbeat(ms: number): void {
    if (this.finished) return;
    this.heartbeatTimer = setTimeout(() => void this.heartbeat(), ms);
  }

  private async heartbeat(): Promise<void> {
    this.heartbeating = true;
    try {
      await this.beat();
    } finally {
      this.heartbeating = false;
    }
  }

  private async beat(): Promise<void> {
    const { task, ctx } = this;
    let next: number;
    try {
      const answer = await ctx.client.heartbeat(task.id, task.lease_id, {
        timeoutMs: Math.min(ctx.httpTimeoutMs, Math.max(1_000, this.leaseExpires - Date.now())),
      });
      if (this.finished) return;
      this.noteLease(answer.leaseExpiresAt, answer.serverTime);
      this.conflicts = 0;
      this.heartbeatBackoff.reset();
      if (answer.cancel) this.stop('cancel');
      next = this.heartbeatInterval();
    } catch (err) {
      if (this.finished) return;
      if (err instanceof HttpStatusError && !err.retryable) {
        // A 409 also answers a transaction that kept losing races: confirm it
        // at once before stopping a script that may be fine.
        if (err.status === 409 && ++this.conflicts < 2) {
          next = 0;
        } else {
          ctx.log('warn', 'the lease of a task was lost', { ...this.ref, err });
          this.stop('lease-lost');
          return;
        }
      } else {
        if (Date.now() >= this.leaseExpires) this.stop('connection-lost');
        next = Math.min(this.heartbeatBackoff.next(), this.heartbeatInterval());
      }
    }
    this.scheduleHeartbeat(next);
  }

  /** A line of the runner's own in the task's log. */
  private note(text: string): void {
    this.logs.write(`[conductor] ${text}\n`);
  }
}
