// A task's service containers on the docker executor: one network for the
// task, each service started detached on it under its name, waited for with
// its health command, its log read back at the end, and everything removed
// whatever became of the task. Every docker call is bounded: a daemon that
// stops answering must never hold a task (or the runner's shutdown) forever.
import { randomBytes } from 'node:crypto';
import { setTimeout as sleep } from 'node:timers/promises';
import { formatDuration } from '../lib/duration.ts';
import { type RunResult, run, spawnGroup } from './process.ts';
import type { Service, Task } from './protocol.ts';

/** How the docker CLI is run, and how patiently. */
export interface ServiceDocker {
  command: string;
  env: Record<string, string>;
  /** The script's container, removed with the services in case its `--rm` has not finished. */
  scriptContainer?: string;
  /** `--label` arguments for the network and every container; default conductor.task alone. */
  labels?: string[];
}

/** Why the services could not be made ready; `transient` when Docker itself failed. */
export class ServiceError extends Error {
  constructor(
    message: string,
    readonly transient: boolean,
  ) {
    super(message);
  }
}

// Bounds on the docker calls. `run --detach` may pull the image first.
const CREATE_MS = 60_000;
const START_MS = 10 * 60_000;
const REMOVE_MS = 30_000;
const LOGS_MS = 30_000;
/** Between two runs of a health command: a service is usually up within seconds. */
const HEALTH_INTERVAL_MS = 1_000;
/** The longest one run of a health command may take, within its timeout. */
const HEALTH_RUN_MS = 30_000;
/** What of a service's log is kept: its last lines, at most this many bytes. */
export const SERVICE_LOG_BYTES = 64 * 1024;
const SERVICE_LOG_LINES = 2_000;
/** What of the health command's last output an error quotes. */
const HEALTH_OUTPUT_CHARS = 500;

/** A short tail of a command's output, for an error message. */
function tail(text: string, max: number): string {
  const t = text.trim();
  return t.length > max ? `…${t.slice(-max)}` : t;
}

/** The lines a service gets as --env arguments, its own env only: never a secret. */
function envArgs(env: Record<string, string>): string[] {
  return Object.entries(env).flatMap(([name, value]) => ['--env', `${name}=${value}`]);
}

/** The `docker run` arguments that start one service on the task's network. */
export function serviceRunArgs(o: {
  container: string;
  network: string;
  taskId: string;
  service: Service;
  labels?: string[];
}): string[] {
  // As in GitLab: `entrypoint` replaces the image's (its first word the
  // program, the rest its first arguments), `command` its CMD.
  const [program, ...entryArgs] = o.service.entrypoint ?? [];
  return [
    'run',
    '--detach',
    '--name',
    o.container,
    '--network',
    o.network,
    '--network-alias',
    o.service.name,
    // Leftovers of a runner killed with SIGKILL can be found by these labels.
    ...(o.labels ?? ['--label', `conductor.task=${o.taskId}`]),
    ...envArgs(o.service.env),
    ...(o.service.entrypoint ? [`--entrypoint=${program ?? ''}`] : []),
    o.service.image,
    ...entryArgs,
    ...(o.service.command ?? []),
  ];
}

/** The services of one attempt of a task. */
export class TaskServices {
  /** The task's network, which the script's container joins too. */
  readonly network: string;
  private readonly prefix: string;
  private networkMade = false;
  /** Every service whose container was asked for, started or not: each is removed. */
  private readonly containers: Array<{ service: Service; container: string }> = [];
  private readonly labels: string[];

  constructor(
    private readonly task: Task,
    private readonly docker: ServiceDocker,
  ) {
    // Random: a retry on this host, or a leftover of a killed runner, never
    // collides with this attempt's names.
    this.prefix = `conductor-${task.id.replace(/[^a-zA-Z0-9]/g, '').slice(0, 12)}-${randomBytes(3).toString('hex')}`;
    this.network = this.prefix;
    this.labels = docker.labels ?? ['--label', `conductor.task=${task.id}`];
  }

  private docker_(args: string[], timeoutMs: number, signal?: AbortSignal): Promise<RunResult> {
    return run(this.docker.command, args, {
      env: this.docker.env,
      timeoutMs,
      ...(signal ? { signal } : {}),
    });
  }

  /**
   * Makes the network and starts each service in order, waiting for its
   * health command before the next; throws a ServiceError, or stops early
   * when `signal` aborts (the caller knows why).
   */
  async start(signal: AbortSignal, note: (text: string) => void): Promise<void> {
    const made = await this.docker_(
      ['network', 'create', ...this.labels, this.network],
      CREATE_MS,
      signal,
    );
    // Asked for even when it failed: a create killed by the timeout may still land.
    this.networkMade = true;
    if (signal.aborted) return;
    if (made.code !== 0) {
      throw new ServiceError(
        `could not make the task's network ${this.network}: ${tail(made.output, HEALTH_OUTPUT_CHARS) || `docker exited with ${made.code}`}`,
        true,
      );
    }
    for (const service of this.task.services) {
      const container = `${this.prefix}-${service.name}`;
      this.containers.push({ service, container });
      note(`starting the service ${service.name} (${service.image})`);
      const started = await this.docker_(
        serviceRunArgs({
          container,
          network: this.network,
          taskId: this.task.id,
          service,
          labels: this.labels,
        }),
        START_MS,
        signal,
      );
      if (signal.aborted) return;
      if (started.code !== 0) {
        // An image that could not be pulled, a daemon that refused: Docker's
        // doing, as `docker run` exiting 125 is for the script.
        throw new ServiceError(
          `the service ${service.name} (${service.image}) could not be started: ${tail(started.output, HEALTH_OUTPUT_CHARS) || `docker exited with ${started.code}`}`,
          true,
        );
      }
      if (service.health !== null) await this.waitHealthy(service, container, signal, note);
      if (signal.aborted) return;
    }
  }

  private async waitHealthy(
    service: Service,
    container: string,
    signal: AbortSignal,
    note: (text: string) => void,
  ): Promise<void> {
    const health = service.health!;
    const deadline = Date.now() + service.health_timeout_s * 1000;
    let last: RunResult;
    for (;;) {
      const left = deadline - Date.now();
      last = await this.docker_(
        ['exec', container, 'sh', '-c', health],
        Math.max(1_000, Math.min(HEALTH_RUN_MS, left)),
        signal,
      );
      if (signal.aborted) return;
      if (last.code === 0) {
        note(`the service ${service.name} is healthy`);
        return;
      }
      // A service that has stopped (a bad command, a missing setting) will
      // never be healthy: fail now, with what it printed.
      const exited = await this.exited(container, signal);
      if (signal.aborted) return;
      if (exited) {
        throw new ServiceError(
          `the service ${service.name} (${service.image}) exited with ${exited.code} before it was healthy${exited.log ? `: ${exited.log}` : ', printing nothing'}`,
          false,
        );
      }
      if (Date.now() + HEALTH_INTERVAL_MS > deadline) break;
      await sleep(HEALTH_INTERVAL_MS, undefined, { signal }).catch(() => undefined);
      if (signal.aborted) return;
    }
    const how =
      last.code === null
        ? `was stopped (${last.signal ?? 'timed out'})`
        : `exited with ${last.code}`;
    const said = tail(last.output, HEALTH_OUTPUT_CHARS);
    // Not transient: the service (or its health command) is the pipeline's,
    // and another attempt would most likely wait out the same.
    throw new ServiceError(
      `the service ${service.name} (${service.image}) was not healthy after ${formatDuration(service.health_timeout_s)}: its health command \`${health}\` last ${how}${said ? `: ${said}` : ', printing nothing'}`,
      false,
    );
  }

  /** The exit status and last lines of a service's container that has stopped; undefined while it runs. */
  private async exited(
    container: string,
    signal: AbortSignal,
  ): Promise<{ code: number; log: string } | undefined> {
    const state = await this.docker_(
      ['inspect', '--format', '{{.State.Status}} {{.State.ExitCode}}', container],
      LOGS_MS,
      signal,
    );
    const [status, code] = state.output.trim().split(' ');
    if (state.code !== 0 || !['exited', 'dead'].includes(status ?? '')) return undefined;
    const log = await this.docker_(['logs', '--tail', '20', container], LOGS_MS, signal);
    return { code: Number(code), log: tail(log.output, HEALTH_OUTPUT_CHARS) };
  }

  /**
   * Each started service's log, as a section of the task's log: a header line,
   * then its last lines (at most SERVICE_LOG_BYTES). Never rejects.
   */
  async logs(): Promise<string> {
    let text = '';
    for (const { service, container } of this.containers) {
      text += `--- service ${service.name} (${service.image}) ---\n`;
      const { output, cut, failed } = await this.readLog(container);
      if (cut)
        text += `[conductor] the service's log is cut to its last ${SERVICE_LOG_BYTES / 1024} KiB\n`;
      if (failed) text += `[conductor] could not read the service's log: ${failed}\n`;
      if (output) text += output.endsWith('\n') ? output : `${output}\n`;
    }
    return text;
  }

  /** `docker logs` of one container, keeping only its tail in memory. */
  private async readLog(
    container: string,
  ): Promise<{ output: string; cut: boolean; failed?: string }> {
    let output = '';
    let cut = false;
    const group = spawnGroup(
      this.docker.command,
      ['logs', '--tail', String(SERVICE_LOG_LINES), container],
      {
        env: this.docker.env,
        onOutput: (text) => {
          output += text;
          if (output.length > 2 * SERVICE_LOG_BYTES) {
            output = output.slice(-SERVICE_LOG_BYTES);
            cut = true;
          }
          return true;
        },
      },
    );
    const timer = setTimeout(() => group.kill(2_000), LOGS_MS);
    const exit = await group.exited;
    clearTimeout(timer);
    if (output.length > SERVICE_LOG_BYTES) {
      output = output.slice(-SERVICE_LOG_BYTES);
      cut = true;
    }
    if (exit.code === 0) return { output, cut };
    return {
      output: '',
      cut: false,
      failed: tail(output, 300) || `docker exited with ${exit.code}`,
    };
  }

  /**
   * Removes every service container, the script's and the network. Failures
   * go to `warn`; never rejects, never waits past its bounds.
   */
  async remove(warn: (message: string, fields: Record<string, unknown>) => void): Promise<void> {
    if (!this.networkMade) return;
    const names = this.containers.map((c) => c.container);
    if (this.docker.scriptContainer) names.push(this.docker.scriptContainer);
    if (names.length) {
      const rm = await this.docker_(['rm', '-f', ...names], REMOVE_MS);
      // A container never made (an aborted start) or already gone is fine.
      const missing = /no such container/i;
      const failures = rm.output
        .split('\n')
        .filter((line) => line.trim() && /error/i.test(line) && !missing.test(line));
      if (rm.code !== 0 && (failures.length || !missing.test(rm.output))) {
        warn('could not remove the service containers of a task', {
          task_id: this.task.id,
          containers: names,
          output: tail(rm.output, 1_000),
          exit_code: rm.code,
        });
      }
    }
    // The script's container may still be leaving the network: try a few times.
    let last: RunResult | undefined;
    for (let attempt = 0; attempt < 3; attempt++) {
      if (attempt) await sleep(1_000);
      last = await this.docker_(['network', 'rm', this.network], REMOVE_MS);
      if (last.code === 0 || /not found|no such network/i.test(last.output)) return;
    }
    warn('could not remove the network of a task', {
      task_id: this.task.id,
      network: this.network,
      output: tail(last!.output, 1_000),
      exit_code: last!.code,
    });
  }
}
