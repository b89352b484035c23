// What the runner tests share: real git repositories in temp dirs, projects
// and workers made through the API, runners in this process or as child
// processes, and bounded waits.
import assert from 'node:assert/strict';
import { type ChildProcess, execFileSync, spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { after } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import { type Runner, type RunnerOptions, startRunner } from '../../runner/index.ts';
import type { TestStack } from '../helpers/stack.ts';

const ROOT = join(import.meta.dirname, '..', '..');

/** A temp dir removed when the test file ends. */
export async function tempDir(prefix: string): Promise<string> {
  const dir = await mkdtemp(join(tmpdir(), prefix));
  after(() => rm(dir, { recursive: true, force: true }));
  return dir;
}

/** A git repository with one commit of `files` on main; answers its path and the commit. */
export async function gitRepo(
  files: Record<string, string>,
): Promise<{ dir: string; sha: string }> {
  const dir = await tempDir('conductor-runner-repo-');
  const git = (...args: string[]) =>
    execFileSync('git', ['-c', 'user.name=t', '-c', 'user.email=t@t', ...args], { cwd: dir })
      .toString()
      .trim();
  git('init', '-q', '-b', 'main');
  for (const [path, text] of Object.entries(files)) {
    execFileSync('mkdir', ['-p', dirname(join(dir, path))]);
    await writeFile(join(dir, path), text);
  }
  git('add', '.');
  git('commit', '-q', '-m', 'test');
  return { dir, sha: git('rev-parse', 'HEAD') };
}

/** Polls `probe` until it answers something other than undefined, or fails after `timeoutMs`. */
export async function waitFor<T>(
  what: string,
  probe: () => Promise<T | undefined> | T | undefined,
  timeoutMs = 20_000,
): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  let last: unknown;
  for (;;) {
    try {
      const value = await probe();
      if (value !== undefined) return value;
    } catch (err) {
      last = err;
    }
    if (Date.now() > deadline) {
      throw new Error(`timed out waiting for ${what}${last ? `: ${last}` : ''}`);
    }
    await sleep(50);
  }
}

export interface TaskView {
  id: string;
  name: string;
  state: string;
  attempt: number;
  exit_code: number | null;
  error: string | null;
  outputs: Record<string, string> | null;
}

export interface JobView {
  job: { id: string; state: string; error: string | null };
  tasks: TaskView[];
}

/** A project on a fresh repository, a worker whose labels match its tasks, and a job trigger. */
export class Fixture {
  constructor(
    readonly stack: TestStack,
    readonly project: string,
    readonly token: string,
    readonly repo: { dir: string; sha: string },
  ) {}

  /**
   * Makes the repository (with `.conductor.yml` built from `tasks`, every task
   * labelled `label` so only this fixture's worker takes them), the project
   * and the worker.
   */
  static async create(
    stack: TestStack,
    label: string,
    tasks: string,
    files: Record<string, string> = {},
    secrets: Record<string, string> = {},
  ): Promise<Fixture> {
    const pipeline = `version: 1\ndefaults:\n  labels: [${label}]\n  retries: 2\ntasks:\n${tasks}`;
    const repo = await gitRepo({ '.conductor.yml': pipeline, ...files });
    const id = `${label}-${randomBytes(3).toString('hex')}`;
    const project = await stack.call('POST', '/v1/projects', {
      token: stack.adminToken,
      body: { id, name: id, forge: 'github', repo: `acme/${id}`, repo_url: repo.dir },
    });
    assert.equal(project.status, 201, project.text);
    for (const [name, value] of Object.entries(secrets)) {
      const put = await stack.call('PUT', `/v1/projects/${id}/secrets/${name}`, {
        token: stack.adminToken,
        body: { value },
      });
      assert.equal(put.status, 204, put.text);
    }
    const worker = await stack.call('POST', '/v1/workers', {
      token: stack.adminToken,
      body: { name: `${label}-worker`, labels: [label] },
    });
    assert.equal(worker.status, 201, worker.text);
    return new Fixture(stack, id, worker.body.token, repo);
  }

  /** Starts a job for the repository's commit and waits for its compile. */
  async trigger(): Promise<string> {
    const started = await this.stack.call('POST', `/v1/projects/${this.project}/jobs`, {
      token: this.stack.adminToken,
      body: { ref: 'main', sha: this.repo.sha },
    });
    assert.equal(started.status, 202, started.text);
    const jobId = started.body.job_id as string;
    const view = await waitFor('the compile', async () => {
      const v = await this.job(jobId);
      return v.job.state === 'pending' ? undefined : v;
    });
    // Compiled into tasks: a runner already polling may have run (or
    // refused) them and finished the job before this poll saw it running.
    assert.ok(view.tasks.length > 0, `the job did not compile: ${view.job.error ?? ''}`);
    return jobId;
  }

  async job(jobId: string): Promise<JobView> {
    const res = await this.stack.call('GET', `/v1/jobs/${jobId}`, { token: this.stack.adminToken });
    assert.equal(res.status, 200, res.text);
    return res.body as JobView;
  }

  async task(jobId: string, name: string): Promise<TaskView> {
    const task = (await this.job(jobId)).tasks.find((t) => t.name === name);
    assert.ok(task, `no task ${name}`);
    return task;
  }

  /** Waits for the job to finish; answers its view. */
  async finished(jobId: string, timeoutMs = 30_000): Promise<JobView> {
    return waitFor(
      `job ${jobId} to finish`,
      async () => {
        const v = await this.job(jobId);
        return ['pending', 'running'].includes(v.job.state) ? undefined : v;
      },
      timeoutMs,
    );
  }

  /** The stored log of a task (the latest attempt unless given). */
  async log(taskId: string, attempt?: number): Promise<string> {
    const q = attempt === undefined ? '' : `?attempt=${attempt}`;
    const res = await this.stack.call('GET', `/v1/tasks/${taskId}/log${q}`, {
      token: this.stack.adminToken,
    });
    assert.equal(res.status, 200, res.text);
    return res.text;
  }

  /** A file holding the worker token, readable by its owner alone, as --token-file wants it. */
  async tokenFile(): Promise<string> {
    const file = join(await tempDir('conductor-runner-token-'), 'token');
    await writeFile(file, `${this.token}\n`, { mode: 0o600 });
    return file;
  }

  /**
   * A runner in this process for this fixture's worker, stopped when the test
   * file ends. Its scripts run as the test's own user unless `over` says
   * otherwise: they write to the test's temp dirs (0700), and the tests of
   * running them as another user are in token-theft and isolation.
   */
  async runner(over: Partial<RunnerOptions> = {}): Promise<Runner> {
    const other = over.runAs || over.buildUser || over.executor === 'docker';
    // Its work directory is removed after the runner stops, not before (as a
    // tempDir's would be, its hook registered first): a runner still in a
    // task writes there, the removal then failed with ENOTEMPTY, and the
    // runner, never stopped, kept the file alive until its time limit.
    const workdir = await mkdtemp(join(tmpdir(), 'conductor-runner-work-'));
    const runner = await startRunner({
      url: this.stack.url,
      token: this.token,
      workdir,
      pollMinMs: 100,
      pollMaxMs: 300,
      killGraceMs: 2_000,
      ...(other ? {} : { sameUser: true }),
      ...over,
    });
    after(async () => {
      try {
        await runner.stop({ graceMs: 0 });
      } finally {
        await rm(workdir, { recursive: true, force: true, maxRetries: 5 });
      }
    });
    return runner;
  }
}

export interface ChildRunner {
  child: ChildProcess;
  exited: Promise<{ code: number | null; signal: NodeJS.Signals | null }>;
  /** What it wrote to stderr so far. */
  stderr(): string;
}

/**
 * The runner as a child process: `node --import tsx scripts/runner.ts ARGS`
 * (what `npm run runner` runs), or with `npm`, `npm run runner -- ARGS`
 * itself, npm and its shell in between.
 */
export function childRunner(
  args: string[],
  env: NodeJS.ProcessEnv = process.env,
  opts: { npm?: boolean } = {},
): ChildRunner {
  const [command, argv] = opts.npm
    ? ['npm', ['run', '--silent', 'runner', '--', ...args]]
    : [process.execPath, ['--import', 'tsx', 'scripts/runner.ts', ...args]];
  const child = spawn(command, argv, {
    cwd: ROOT,
    env,
    // A process group of its own, so that npm's children go with it at the end.
    detached: true,
    stdio: ['ignore', 'ignore', 'pipe'],
  });
  let stderr = '';
  child.stderr?.on('data', (d: Buffer) => {
    stderr += d.toString();
  });
  const exited = new Promise<{ code: number | null; signal: NodeJS.Signals | null }>((done) =>
    child.once('exit', (code, signal) => done({ code, signal })),
  );
  after(() => {
    if (child.pid !== undefined) killGroup(child.pid);
  });
  return { child, exited, stderr: () => stderr };
}

/** Kills a process group left running (a script whose runner was SIGKILLed); ignores a gone one. */
export function killGroup(pgid: number): void {
  try {
    process.kill(-pgid, 'SIGKILL');
  } catch {
    // Gone already.
  }
}

/** True while a process group has members. */
export function groupAlive(pgid: number): boolean {
  try {
    process.kill(-pgid, 0);
    return true;
  } catch {
    return false;
  }
}

// A stand-in for the docker CLI where there is no Docker engine (only the
// client, or nothing). Every command it is given is appended, one a line
// (arguments joined by spaces), to `commands` beside it. `info` answers; `run`
// runs the container's script on the host, as root if the test is (as a
// container's root), with each bind mount's host path in place of its target.
// What a script does to /conductor it does to the runner's own directory, as a
// container's root can through the read-write bind mount: replace a file the
// runner reads with a link to a host file, or with a FIFO.
//
// `image inspect` answers an empty USER (root), `ps` and `network ls` nothing.
// Services: `run --detach` remembers the container (in containers/ beside it)
// and gives it a log of one line per --env value (an image named
// `fake/chatty…`: 20,000 lines); one named `fake/missing…` cannot be pulled
// (exit 125); one named `fake/stuck…` cannot be removed. `exec NAME sh -c CMD` runs CMD
// on the host, for a container that exists; `logs` prints the log; `rm -f`
// and `network create|rm` answer as Docker does.
const FAKE_DOCKER = `#!/usr/bin/env bash
set -u
here=$(cd "$(dirname "$0")" && pwd)
printf '%s\n' "$*" >>"$here/commands"
state=$here/containers
mkdir -p "$state"
case "$1" in
  info) echo 0.0.0-fake; exit 0 ;;
  stop) exit 0 ;;
  image | ps) exit 0 ;;
  network)
    case "$2" in
      create) echo "fake-network-\${*: -1}"; exit 0 ;;
      rm | ls) exit 0 ;;
    esac
    echo "fake docker: network $2 is not faked" >&2; exit 125 ;;
  exec)
    if [ ! -f "$state/$2" ]; then echo "Error response from daemon: No such container: $2" >&2; exit 1; fi
    shift 2
    cd / && exec "$@" ;;
  logs)
    c=\${*: -1}
    if [ ! -f "$state/$c" ]; then echo "Error response from daemon: No such container: $c" >&2; exit 1; fi
    cat "$state/$c.log"; exit 0 ;;
  rm)
    shift; [ "$1" = -f ] && shift
    code=0
    for c in "$@"; do
      if grep -q '^fake/stuck' "$state/$c" 2>/dev/null; then
        echo "Error response from daemon: cannot remove container $c: device or resource busy" >&2; code=1
      elif [ -f "$state/$c" ]; then rm -f "$state/$c" "$state/$c.log"
      else echo "Error response from daemon: No such container: $c" >&2; code=1; fi
    done
    exit "$code" ;;
  run) shift ;;
  *) echo "fake docker: $1 is not faked" >&2; exit 125 ;;
esac
if [ "$1" = --detach ]; then
  shift
  name='' envs=()
  while [ $# -gt 0 ]; do
    case "$1" in
      --name) name=$2; shift 2 ;;
      --env) envs+=("$2"); shift 2 ;;
      --network | --network-alias | --label) shift 2 ;;
      -*) echo "fake docker: $1 is not faked" >&2; exit 125 ;;
      *) break ;;
    esac
  done
  case "$1" in fake/missing*)
    echo "Unable to find image '$1' locally" >&2
    echo "docker: Error response from daemon: pull access denied for $1." >&2
    exit 125 ;;
  esac
  echo "$1" >"$state/$name"
  case "$1" in fake/chatty*) seq 1 20000 | sed 's/^/chatty line /' >"$state/$name.log"; echo "fake-container-$name"; exit 0 ;; esac
  { echo "$1 starting"; for e in "\${envs[@]}"; do echo "env $e"; done; echo "$1 ready"; } >"$state/$name.log"
  echo "fake-container-$name"
  exit 0
fi
ws='' meta=''
while [ $# -gt 0 ]; do
  case "$1" in
    --mount)
      src=\${2#*source=}; src=\${src%%,*}
      target=\${2#*target=}; target=\${target%%,*}
      case "$target" in /workspace) ws=$src ;; /conductor) meta=$src ;; esac
      shift 2 ;;
    --name | --workdir | --entrypoint | --network | --label) shift 2 ;;
    --rm | --init) shift ;;
    -*) echo "fake docker: $1 is not faked" >&2; exit 125 ;;
    *) break ;;
  esac
done
if [ -z "$ws" ] || [ -z "$meta" ]; then echo 'fake docker: no /workspace or /conductor mount' >&2; exit 125; fi
script=$(mktemp)
translate() { sed -e "s#/conductor#$meta#g" -e "s#/workspace#$ws#g" "$@"; }
translate "$meta/script.sh" >"$script"
translate -i "$meta/env.sh"
cd "$ws" && bash "$script"
code=$?
rm -f "$script"
exit "$code"
`;

/** A directory holding the fake `docker`, for the front of a runner's PATH. */
export async function fakeDockerDir(): Promise<string> {
  const dir = await tempDir('conductor-fake-docker-');
  await writeFile(join(dir, 'docker'), FAKE_DOCKER, { mode: 0o755 });
  return dir;
}

/** Runner options for the docker executor with the fake `docker` first on its PATH. */
export async function fakeDocker(): Promise<Partial<RunnerOptions>> {
  return (await recordingDocker()).options;
}

/**
 * The fake `docker` with what it was told: `commands()` answers every command
 * given so far, one a line, arguments joined by spaces.
 */
export async function recordingDocker(): Promise<{
  options: Partial<RunnerOptions>;
  commands: () => Promise<string[]>;
}> {
  const dir = await fakeDockerDir();
  return {
    options: {
      executor: 'docker',
      env: { ...process.env, PATH: `${dir}:${process.env.PATH ?? '/usr/bin:/bin'}` },
    },
    commands: async () =>
      (await readFile(join(dir, 'commands'), 'utf8').catch(() => '')).split('\n').filter(Boolean),
  };
}
