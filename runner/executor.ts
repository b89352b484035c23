// Where a script runs: on the host (shell), or in its task's image (docker).
import { chmod, chown, lstat, rm, rmdir, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { exportFile, taskVariables } from './env.ts';
import { type Exit, run, spawnGroup } from './process.ts';
import type { Task } from './protocol.ts';
import { chownTree, type RunAs } from './runas.ts';
import { ENV_FAILED_STATUS, wrapperScript } from './script.ts';
import { TaskServices } from './services.ts';
import { readTaskFile } from './taskfile.ts';

export type ExecutorKind = 'shell' | 'docker';

/** One task's script about to start. */
export interface ScriptJob {
  task: Task;
  /** The task's directory, holding `workspace` and `metaDir`. */
  taskDir: string;
  /** The checkout, on the host. */
  workspace: string;
  /** A directory of the runner's for the script file, the outputs file and the like, on the host. */
  metaDir: string;
  onOutput: (text: string) => boolean;
  onPaused: (resume: () => void) => void;
  /** The task's services' network, which the script joins (docker only). */
  network?: string;
}

/** A running script. */
export interface Execution {
  readonly exited: Promise<Exit>;
  /** Where the script's outputs file is, on the host. */
  readonly outputFile: string;
  /** Where the script records the line it ended at, on the host. */
  readonly lineFile: string;
  /** Stops the script and everything it started: SIGTERM, then SIGKILL after `graceMs`. */
  stop(graceMs: number): void;
  /**
   * Why the script never ran, when the exit says so (the executor failed, or
   * the script could not be given its environment); undefined when the
   * status is the script's. `transient`: another attempt may do better.
   */
  notStarted(exit: Exit): Promise<{ error: string; transient: boolean } | undefined>;
}

export interface Executor {
  readonly kind: ExecutorKind;
  start(job: ScriptJob): Promise<Execution>;
  /** Removes a task's directory and everything in it, once the task is over. */
  remove(taskDir: string): Promise<void>;
  /** The task's service containers, not yet started; absent where services cannot run (shell). */
  services?(task: Task): TaskServices;
}

const removeAll = (dir: string) => rm(dir, { recursive: true, force: true });

/**
 * Runs scripts with bash on the runner's own host (a task's image is
 * ignored), from `env` and the task's variables. With `runAs`, as that user:
 * the workspace and the two files the script writes are given to it, the
 * task's directories stay the runner's (so the script cannot swap the files
 * the runner reads afterwards for links elsewhere), and the script's leftovers
 * are removed as that user too.
 */
export function shellExecutor(opts: { env: Record<string, string>; runAs?: RunAs }): Executor {
  const who = opts.runAs;
  return {
    kind: 'shell',
    async start(job) {
      const outputFile = join(job.metaDir, 'output');
      const lineFile = join(job.metaDir, 'line');
      const scriptFile = join(job.metaDir, 'script.sh');
      await writeFile(outputFile, '', { mode: 0o600 });
      await writeFile(lineFile, '', { mode: 0o600 });
      await writeFile(
        scriptFile,
        wrapperScript(job.task.script, { lineFile, cwd: job.workspace }),
        { mode: 0o644 },
      );
      if (who) {
        // Until now the task's directory was the runner's alone (mkdtemp: 0700),
        // so nothing of the user's could race the checkout or this chown.
        await chownTree(job.workspace, who);
        await chown(outputFile, who.uid, who.gid);
        await chown(lineFile, who.uid, who.gid);
        await chmod(job.metaDir, 0o711);
        await chmod(scriptFile, 0o644);
        await chmod(job.taskDir, 0o711);
      }
      const vars = taskVariables(job.task, { workspace: job.workspace, outputFile });
      // Started beside its script, which changes into the workspace: the
      // shell's messages then say `script.sh: line 3`, not a temporary path.
      const group = spawnGroup('bash', ['script.sh'], {
        cwd: job.metaDir,
        env: { ...opts.env, ...vars },
        ...(who ? { uid: who.uid, gid: who.gid } : {}),
        onOutput: job.onOutput,
        onPaused: job.onPaused,
      });
      return {
        exited: group.exited,
        outputFile,
        lineFile,
        stop: (graceMs) => group.kill(graceMs),
        notStarted: async () => undefined,
      };
    },
    async remove(taskDir) {
      const workspace = join(taskDir, 'workspace');
      const owner = await lstat(workspace).then(
        (s) => s.uid,
        () => undefined,
      );
      if (!who || owner !== who.uid) return removeAll(taskDir);
      // The runner is root, and a process the script left running may still
      // change the workspace: a recursive removal as root could be led
      // through a link swapped in mid-way and delete elsewhere. As the user,
      // such a race reaches only the user's own files; the runner then
      // removes only what the user could never write to.
      await run('rm', ['-rf', '--', workspace], {
        env: opts.env,
        uid: who.uid,
        gid: who.gid,
        timeoutMs: 120_000,
      });
      try {
        await rmdir(workspace);
      } catch (err) {
        throw new Error(
          `the workspace was not empty after ${who.name} emptied it (a process the script left running?): ${(err as Error).message}`,
        );
      }
      await removeAll(join(taskDir, 'conductor'));
      await rmdir(taskDir);
    },
  };
}

// Paths inside the container.
const CONTAINER_WORKSPACE = '/workspace';
const CONTAINER_META = '/conductor';

export interface DockerRun {
  /** The container's name, unique per attempt, so it can be stopped by name. */
  name: string;
  image: string;
  /** Host paths mounted at /workspace and /conductor. */
  workspace: string;
  metaDir: string;
  /** The task's services' network, where the script reaches them by name. */
  network?: string;
  /** `--label` arguments (dockerLabels): how a later runner finds the container if this one is killed. */
  labels?: string[];
}

/** The two bind mounts every container of a task's script gets. */
function mounts(workspace: string, metaDir: string): string[] {
  return [
    '--mount',
    `type=bind,source=${workspace},target=${CONTAINER_WORKSPACE}`,
    '--mount',
    `type=bind,source=${metaDir},target=${CONTAINER_META}`,
  ];
}

/**
 * The `docker run` arguments for a script: the checkout mounted at
 * /workspace (the working directory), the runner's files at /conductor, an
 * init process that passes signals on and reaps orphans, and the image's
 * entrypoint replaced by a shell that runs the script with bash, or sh where
 * the image has no bash. The environment is not on this command line (where
 * `ps` and `docker inspect` would show the secrets): the script sources it
 * from a file in /conductor and deletes it. The image's USER is kept.
 */
export function dockerRunArgs(o: DockerRun): string[] {
  const script = `${CONTAINER_META}/script.sh`;
  return [
    'run',
    '--rm',
    '--init',
    '--name',
    o.name,
    ...(o.labels ?? []),
    ...(o.network ? ['--network', o.network] : []),
    ...mounts(o.workspace, o.metaDir),
    '--workdir',
    CONTAINER_WORKSPACE,
    '--entrypoint',
    'sh',
    o.image,
    '-c',
    `if command -v bash >/dev/null 2>&1; then exec bash ${script}; else exec sh ${script}; fi`,
  ];
}

/** The name of the container of one attempt of a task. */
export function containerName(task: Task): string {
  return `conductor-${task.id}-${task.attempt}`.replace(/[^a-zA-Z0-9_.-]/g, '-');
}

/** A USER that is root: the image's files need no handing over. */
export function isRootUser(user: string): boolean {
  return user === '' || /^(root|0)(:|$)/.test(user);
}

// `docker run` answers 125 when Docker itself failed (the image could not be
// pulled, the daemon refused), but a script may exit 125 too: the status is
// Docker's only when the script never started (its line file is still empty).
const DOCKER_RUN_FAILED = 125;
// Bounds on the docker calls around a script.
const PULL_MS = 10 * 60_000;
const INSPECT_MS = 30_000;
const HAND_OVER_MS = 120_000;

/**
 * Runs scripts in their task's image (or `defaultImage`) with the docker CLI.
 * Fails when the Docker engine does not answer `docker info`. Every container
 * and network it makes carries `labels` (dockerLabels), so that a runner
 * started later on the same work directory can remove what a killed one left.
 */
export async function dockerExecutor(opts: {
  command?: string;
  defaultImage: string;
  env: Record<string, string>;
  labels?: (taskId: string) => string[];
}): Promise<Executor> {
  const docker = opts.command ?? 'docker';
  const labels = opts.labels ?? ((taskId: string) => ['--label', `conductor.task=${taskId}`]);
  const info = await run(docker, ['info', '--format', '{{.ServerVersion}}'], {
    env: opts.env,
    timeoutMs: 20_000,
  });
  if (info.code !== 0) {
    const said = info.output.trim().split('\n').filter(Boolean).at(-1) ?? 'no answer';
    throw new Error(
      `--executor docker needs a Docker engine, but \`${docker} info\` failed: ${said.slice(0, 300)}`,
    );
  }
  const call = (args: string[], timeoutMs: number) =>
    run(docker, args, { env: opts.env, timeoutMs });

  /** The image's USER, pulling the image first when it is not here; undefined when Docker cannot say. */
  async function imageUser(image: string): Promise<string | undefined> {
    const inspect = () =>
      call(['image', 'inspect', '--format', '{{.Config.User}}', '--', image], INSPECT_MS);
    let found = await inspect();
    if (found.code !== 0) {
      // Pulled as `docker run` would; when that fails, `docker run` says why.
      const pulled = await call(['pull', '--quiet', '--', image], PULL_MS);
      if (pulled.code !== 0) return undefined;
      found = await inspect();
      if (found.code !== 0) return undefined;
    }
    return found.output.trim();
  }

  return {
    kind: 'docker',
    async start(job) {
      const outputFile = join(job.metaDir, 'output');
      const lineFile = join(job.metaDir, 'line');
      const envFile = join(job.metaDir, 'env.sh');
      const image = job.task.image ?? opts.defaultImage;
      const taskLabels = labels(job.task.id);
      await writeFile(outputFile, '');
      await writeFile(envFile, '', { mode: 0o600 });
      await chmod(envFile, 0o600);
      const vars = taskVariables(job.task, {
        workspace: CONTAINER_WORKSPACE,
        outputFile: `${CONTAINER_META}/output`,
      });
      await writeFile(envFile, exportFile(vars));
      await writeFile(
        join(job.metaDir, 'script.sh'),
        wrapperScript(job.task.script, {
          envFile: `${CONTAINER_META}/env.sh`,
          lineFile: `${CONTAINER_META}/line`,
        }),
      );
      const user = await imageUser(image);
      if (user !== undefined && !isRootUser(user)) {
        // The image runs as another user than root (node's images, CI images):
        // the checkout and the runner's files (the environment file, 0600) are
        // handed to it, by a container of the same image as root, so that a
        // user name resolves as the image knows it. The task's directory on the
        // host stays the runner's (0700).
        const handed = await call(
          [
            'run',
            '--rm',
            ...taskLabels,
            '--network',
            'none',
            '--user',
            '0:0',
            ...mounts(job.workspace, job.metaDir),
            '--entrypoint',
            'chown',
            image,
            '-R',
            '-h',
            user,
            CONTAINER_WORKSPACE,
            CONTAINER_META,
          ],
          HAND_OVER_MS,
        );
        if (handed.code !== 0) {
          throw new Error(
            `could not hand the workspace to the image's user ${user} (chown in ${image}): ${handed.output.trim().slice(-300) || `docker exited with ${handed.code}`}`,
          );
        }
      }
      const name = containerName(job.task);
      const group = spawnGroup(
        docker,
        dockerRunArgs({
          name,
          image,
          workspace: job.workspace,
          metaDir: job.metaDir,
          labels: taskLabels,
          ...(job.network ? { network: job.network } : {}),
        }),
        { env: opts.env, onOutput: job.onOutput, onPaused: job.onPaused },
      );
      return {
        exited: group.exited,
        outputFile,
        lineFile,
        stop(graceMs) {
          // The container is the daemon's child, not ours: stop it by name.
          void run(docker, ['stop', '--time', String(Math.ceil(graceMs / 1000)), name], {
            env: opts.env,
            timeoutMs: graceMs + 10_000,
          });
          group.kill(graceMs + 5_000);
        },
        async notStarted(exit) {
          if (exit.code !== DOCKER_RUN_FAILED && exit.code !== ENV_FAILED_STATUS) return undefined;
          // The script's EXIT trap writes the line file: once it holds
          // anything, the status is the script's, whatever it is.
          const line = await readTaskFile(lineFile, 'the line file', 1024, '').catch(() => 'x');
          if (line.trim() !== '') return undefined;
          if (exit.code === ENV_FAILED_STATUS) {
            return {
              error: `the script did not start: the task's environment (${CONTAINER_META}/env.sh) could not be read in the container${user && !isRootUser(user) ? ` as the image's user ${user}` : ''}`,
              transient: false,
            };
          }
          return { error: `the executor failed (exit code ${exit.code})`, transient: true };
        },
      };
    },
    remove: removeAll,
    services: (task) =>
      new TaskServices(task, {
        command: docker,
        env: opts.env,
        scriptContainer: containerName(task),
        labels: labels(task.id),
      }),
  };
}
