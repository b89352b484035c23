// What a docker-executor runner killed outright (SIGKILL, a crash, a reboot)
// leaves behind: its scripts' and services' containers, still running, and
// their networks. Every container and network a runner makes is labelled
// with the runner's id and its work directory; each runner records its id and
// process in the work directory while it runs. A runner that starts removes
// what carries its work directory's label but belongs to no runner alive, and
// says so: several runners may share a work directory, and none touches
// another's live containers.
import { randomBytes } from 'node:crypto';
import { mkdir, readdir, readFile, rm, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import type { Logger } from './events.ts';
import { run } from './process.ts';

/** Where the runners using a work directory record themselves, one file each. */
const RUNNERS_DIR = '.runners';
const LIST_MS = 30_000;
const REMOVE_MS = 60_000;

/** The labels every container and network of a task carries. */
export function dockerLabels(taskId: string, runner: { id: string; workdir: string }): string[] {
  return [
    '--label',
    `conductor.task=${taskId}`,
    '--label',
    `conductor.runner=${runner.id}`,
    '--label',
    `conductor.workdir=${runner.workdir}`,
  ];
}

/** When a process started (clock ticks since boot, Linux), telling it from a later one with its pid. */
async function startTime(pid: number): Promise<string | undefined> {
  try {
    const stat = await readFile(`/proc/${pid}/stat`, 'utf8');
    // The fields after the command name, which is in parentheses and may hold anything.
    return stat.slice(stat.lastIndexOf(')') + 2).split(' ')[19];
  } catch {
    return undefined;
  }
}

async function alive(record: string): Promise<boolean> {
  const [pidText, started] = record.trim().split(' ');
  const pid = Number(pidText);
  if (!Number.isInteger(pid) || pid <= 0) return false;
  try {
    process.kill(pid, 0);
  } catch (err) {
    // EPERM: it exists, as another user.
    if ((err as NodeJS.ErrnoException).code !== 'EPERM') return false;
  }
  const now = await startTime(pid);
  return now === undefined || started === undefined || started === '' || now === started;
}

/** A runner's record in its work directory, and the removal of what dead ones left there. */
export class Leftovers {
  readonly id = randomBytes(6).toString('hex');
  private readonly dir: string;

  constructor(
    readonly workdir: string,
    private readonly docker: { command: string; env: Record<string, string> },
    private readonly log: Logger,
  ) {
    this.dir = join(workdir, RUNNERS_DIR);
  }

  labels(taskId: string): string[] {
    return dockerLabels(taskId, { id: this.id, workdir: this.workdir });
  }

  /** Records this runner in the work directory; then nothing of its is taken for a leftover. */
  async register(): Promise<void> {
    await mkdir(this.dir, { recursive: true, mode: 0o700 });
    const started = (await startTime(process.pid)) ?? '';
    await writeFile(join(this.dir, this.id), `${process.pid} ${started}\n`, { mode: 0o600 });
  }

  /** Forgets this runner's record (it stopped with nothing left running). */
  async unregister(): Promise<void> {
    await rm(join(this.dir, this.id), { force: true });
  }

  /**
   * Removes the containers, then the networks, labelled with this work
   * directory whose runner is no longer alive, and those runners' records.
   * Never rejects: a failure is logged, and the runner starts anyway.
   */
  async removeDead(): Promise<void> {
    try {
      const live = new Set<string>([this.id]);
      const dead: string[] = [];
      for (const id of await readdir(this.dir).catch(() => [] as string[])) {
        const record = await readFile(join(this.dir, id), 'utf8').catch(() => '');
        if (await alive(record)) live.add(id);
        else dead.push(id);
      }
      const find = async (what: 'container' | 'network') => {
        const listed = await run(
          this.docker.command,
          [
            what === 'container' ? 'ps' : 'network',
            ...(what === 'container' ? ['--all'] : ['ls']),
            '--filter',
            `label=conductor.workdir=${this.workdir}`,
            '--format',
            `{{${what === 'container' ? '.Names' : '.Name'}}}\t{{.Label "conductor.runner"}}`,
          ],
          { env: this.docker.env, timeoutMs: LIST_MS },
        );
        if (listed.code !== 0) throw new Error(`docker ${what} listing failed: ${listed.output}`);
        return listed.output
          .split('\n')
          .map((line) => line.trim().split('\t'))
          .filter(([name, runner]) => name && !live.has(runner ?? ''))
          .map(([name]) => name!);
      };
      const containers = await find('container');
      if (containers.length) {
        const removed = await run(this.docker.command, ['rm', '--force', ...containers], {
          env: this.docker.env,
          timeoutMs: REMOVE_MS,
        });
        if (removed.code !== 0) throw new Error(`docker rm failed: ${removed.output}`);
      }
      const networks = await find('network');
      for (const network of networks) {
        const removed = await run(this.docker.command, ['network', 'rm', network], {
          env: this.docker.env,
          timeoutMs: REMOVE_MS,
        });
        if (removed.code !== 0) throw new Error(`docker network rm failed: ${removed.output}`);
      }
      for (const id of dead) await rm(join(this.dir, id), { force: true });
      if (containers.length || networks.length) {
        this.log(
          'warn',
          'removed the containers and networks an earlier runner with this work directory left running',
          { workdir: this.workdir, containers, networks },
        );
      }
    } catch (err) {
      this.log('warn', 'could not remove what an earlier runner with this work directory left', {
        workdir: this.workdir,
        err,
      });
    }
  }
}
