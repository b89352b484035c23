// Jobs: list, show (tasks, states, durations, ids), start by hand, approve,
// cancel, rerun, unblock a block step, and read logs (a task's, or the failed
// ones', following a running task). A job is named by its id or as
// PROJECT#NUMBER (or a number with --project).
import type { Command } from 'commander';
import { taskLines } from '../lib/pages/graph.ts';
import { UNFINISHED_TASK_STATES } from '../lib/states.ts';
import { Cli, CliError, type CliIo, duration, many, pairs, seg } from './context.ts';

// biome-ignore lint/suspicious/noExplicitAny: a task as GET /v1/jobs/{id} answers it.
type Task = any;

const PROJECT = [
  '--project <ID>',
  'the project, when the job is given by its number alone',
] as const;

const unfinished = (state: string) => (UNFINISHED_TASK_STATES as readonly string[]).includes(state);

/** The tasks `--task NAME` names: that task, or each of its matrix's (`NAME (os: linux)`). */
function named(tasks: Task[], name: string): Task[] {
  const exact = tasks.filter((t) => t.name === name);
  if (exact.length > 0) return exact;
  return tasks.filter((t) => t.name.startsWith(`${name} `) || t.name.startsWith(`${name}[`));
}

/** A job's id from what was typed. */
async function jobOf(cli: Cli, ref: string, o: { project?: string }): Promise<string> {
  return cli.jobId(ref, o.project);
}

/** `jobs`, `job`, `job approve`, `trigger`, `cancel`, `rerun`, `unblock`, `logs`, `log`. */
export function registerJobs(program: Command, io: CliIo): void {
  program
    .command('jobs')
    .description("list a project's jobs, newest first")
    .requiredOption('--project <ID>')
    .option('--limit <N>', 'how many (at most 100; default 20)')
    .option('--before <N>', 'older than job number N')
    .action(async (o, cmd: Command) => {
      const cli = new Cli(io, cmd);
      const query = new URLSearchParams();
      if (o.limit) query.set('limit', o.limit);
      if (o.before) query.set('before', o.before);
      const reply = (await cli.call('GET', `/v1/projects/${seg(o.project)}/jobs?${query}`)).json;
      cli.print(reply, () =>
        cli.table(
          ['JOB', 'STATE', 'TRIGGER', 'REF', 'SHA', 'DURATION', 'ID'],
          // biome-ignore lint/suspicious/noExplicitAny: the API's jobs.
          reply.jobs.map((j: any) => [
            `${o.project}#${j.number}`,
            j.state,
            j.trigger,
            j.ref,
            j.sha.slice(0, 12),
            duration(j.started_at ?? j.created_at, j.finished_at),
            j.id,
          ]),
        ),
      );
    });

  const job = program
    .command('job')
    .description('show a job: its tasks (state, duration, id) and its page')
    .argument('[JOB]', 'PROJECT#NUMBER or the job id')
    .option(...PROJECT)
    .action(async (ref: string | undefined, o, cmd: Command) => {
      const cli = new Cli(io, cmd);
      if (!ref) throw new CliError('job needs a job: job PROJECT#NUMBER (or its id)', 2);
      const id = await jobOf(cli, ref, o);
      const reply = (await cli.call('GET', `/v1/jobs/${seg(id)}`)).json;
      cli.print(reply, () => {
        const { job: j, tasks } = reply;
        io.out(`job ${j.project_id}#${j.number} ${j.state} (${j.trigger} ${j.ref} ${j.sha})`);
        if (j.page_url) io.out(`page: ${j.page_url}`);
        io.out(
          `${j.trusted ? 'trusted' : 'untrusted'}${j.trust_reason ? `: ${j.trust_reason}` : ''}`,
        );
        if (j.state === 'blocked') {
          io.out(`waiting for approval: ${cli.name} job approve ${j.project_id}#${j.number}`);
        }
        if (j.error) io.out(j.error);
        io.out('');
        cli.table(
          ['TASK', 'STATE', 'DURATION', 'ATTEMPT', 'ID', 'NOTE'],
          tasks.map((t: Task) => [
            t.name,
            t.state,
            duration(t.started_at, t.finished_at),
            `${t.attempt}/${t.max_attempts}`,
            t.id,
            taskLines(t).note,
          ]),
        );
        for (const t of tasks as Task[]) {
          if (t.state === 'blocked') {
            io.out(
              `unblock it: ${cli.name} unblock ${j.project_id}#${j.number} --task '${t.name}'`,
            );
          }
        }
      });
    });
  job
    .command('approve')
    .description('let a blocked (untrusted) job run, still untrusted')
    .argument('JOB')
    .option(...PROJECT)
    .action(async (ref: string, o, cmd: Command) => {
      const cli = new Cli(io, cmd);
      const id = await jobOf(cli, ref, o);
      const reply = (await cli.call('POST', `/v1/jobs/${seg(id)}/approve`)).json;
      cli.print(reply, () => io.out(`approved ${ref}: it runs untrusted`));
    });

  program
    .command('trigger')
    .description("start a job by hand (without --sha: the ref's head)")
    .requiredOption('--project <ID>')
    .option('--ref <REF>', 'the branch or ref', 'main')
    .option('--sha <SHA>')
    .option('--input <NAME=VALUE>', 'a pipeline input (repeatable)', many)
    .action(async (o, cmd: Command) => {
      const cli = new Cli(io, cmd);
      const inputs = pairs('input', o.input);
      const reply = (
        await cli.call('POST', `/v1/projects/${seg(o.project)}/jobs`, {
          ref: o.ref,
          ...(o.sha ? { sha: o.sha } : {}),
          ...(inputs ? { inputs } : {}),
        })
      ).json;
      cli.print(reply, () => {
        io.out(`started ${o.project}#${reply.number} (${reply.job_id})`);
        io.out(`follow it: ${cli.name} job ${o.project}#${reply.number}`);
      });
    });

  program
    .command('cancel')
    .description('cancel a job (a blocked one is declined)')
    .argument('JOB')
    .option(...PROJECT)
    .action(async (ref: string, o, cmd: Command) => {
      const cli = new Cli(io, cmd);
      const id = await jobOf(cli, ref, o);
      const reply = (await cli.call('POST', `/v1/jobs/${seg(id)}/cancel`)).json;
      cli.print(reply, () => io.out(`cancelled ${ref}`));
    });

  program
    .command('rerun')
    .description('run a finished job again as a new job')
    .argument('JOB')
    .option(...PROJECT)
    .option('--failed-only', 'keep the successful tasks; run the failed ones and what needs them')
    .action(async (ref: string, o, cmd: Command) => {
      const cli = new Cli(io, cmd);
      const id = await jobOf(cli, ref, o);
      const reply = (
        await cli.call('POST', `/v1/jobs/${seg(id)}/rerun`, { failed_only: o.failedOnly ?? false })
      ).json;
      if (cli.globals.json) {
        io.out(JSON.stringify(reply, null, 2));
        return;
      }
      const project = ref.includes('#')
        ? ref.slice(0, ref.lastIndexOf('#'))
        : (o.project ??
          (await cli.call('GET', `/v1/jobs/${seg(reply.job_id)}`)).json.job.project_id);
      io.out(`started ${project}#${reply.number} (${reply.job_id})`);
      io.out(`follow it: ${cli.name} job ${project}#${reply.number}`);
    });

  program
    .command('unblock')
    .description('let a block step go on, with the values of its fields')
    .argument('JOB')
    .requiredOption('--task <NAME>', 'the block step')
    .option('--field <NAME=VALUE>', 'a field of the block (repeatable)', many)
    .option(...PROJECT)
    .action(async (ref: string, o, cmd: Command) => {
      const cli = new Cli(io, cmd);
      const id = await jobOf(cli, ref, o);
      const fields = pairs('field', o.field);
      const reply = (
        await cli.call(
          'POST',
          `/v1/jobs/${seg(id)}/tasks/${seg(o.task)}/unblock`,
          fields ? { fields } : {},
        )
      ).json;
      cli.print(reply, () => io.out(`unblocked ${o.task} of ${ref}`));
    });

  program
    .command('logs')
    .description("print a job's logs: one task's (--task), else the failed tasks'")
    .argument('JOB')
    .option('--task <NAME>', 'the task (a matrix task: each of its runs)')
    .option('-f, --follow', 'keep printing while the task runs')
    .option(...PROJECT)
    .action(async (ref: string, o, cmd: Command) => {
      const cli = new Cli(io, cmd);
      const id = await jobOf(cli, ref, o);
      const { tasks } = (await cli.call('GET', `/v1/jobs/${seg(id)}`)).json as { tasks: Task[] };
      let chosen: Task[];
      if (o.task) {
        chosen = named(tasks, o.task);
        if (chosen.length === 0) {
          throw new CliError(
            `${ref} has no task ${o.task}; its tasks: ${tasks.map((t) => t.name).join(', ')}`,
          );
        }
      } else {
        chosen = tasks.filter((t) => t.state === 'failed');
        if (chosen.length === 0 && !cli.globals.json) {
          io.out(
            `no task of ${ref} failed; --task NAME prints one (${tasks.map((t) => t.name).join(', ')})`,
          );
          return;
        }
      }
      if (o.follow && cli.globals.json) {
        throw new CliError('--follow prints as the log grows: it takes no --json', 2);
      }
      const logs: { task_id: string; name: string; state: string; log: string }[] = [];
      for (const task of chosen) {
        if (chosen.length > 1 || !o.task) cli.say(`==> ${task.name} (${task.state}) <==`);
        if (o.follow) {
          await follow(cli, id, task);
        } else {
          const text = await readLog(cli, task.id);
          logs.push({ task_id: task.id, name: task.name, state: task.state, log: text });
          cli.say(text.replace(/\n$/, ''));
        }
      }
      if (cli.globals.json) io.out(JSON.stringify({ tasks: logs }, null, 2));
    });

  program
    .command('log')
    .description("print a task's log by the task's id")
    .argument('TASK_ID')
    .option('--attempt <N>', 'an earlier attempt')
    .action(async (taskId: string, o, cmd: Command) => {
      const cli = new Cli(io, cmd);
      const read = await readPages(cli, taskId, o.attempt);
      cli.print({ task_id: taskId, attempt: Number(read.attempt), log: read.text }, () =>
        io.out(read.text),
      );
    });
}

/** A task's whole log (of its latest attempt). */
async function readLog(cli: Cli, taskId: string): Promise<string> {
  return (await readPages(cli, taskId, undefined)).text;
}

/** Page after page (each at most 1 MiB), all from the attempt the first page read. */
async function readPages(
  cli: Cli,
  taskId: string,
  attempt: string | undefined,
  from = 0,
): Promise<{ text: string; attempt: string | undefined; end: number }> {
  let offset = from;
  let text = '';
  for (;;) {
    const query = new URLSearchParams({ offset: String(offset) });
    if (attempt) query.set('attempt', attempt);
    const page = await cli.call('GET', `/v1/tasks/${seg(taskId)}/log?${query}`);
    text += page.text;
    attempt = page.headers.get('x-log-attempt') ?? attempt;
    const end = Number(page.headers.get('x-log-end'));
    if (!(end > offset)) break;
    offset = end;
    if (end >= Number(page.headers.get('x-log-size'))) break;
  }
  return { text, attempt, end: offset };
}

/** Prints a task's log as it grows, until the task has finished and all of it is printed. */
async function follow(cli: Cli, jobId: string, task: Task): Promise<void> {
  const sleep = cli.io.sleep ?? ((ms: number) => new Promise((r) => setTimeout(r, ms)));
  let offset = 0;
  let attempt: string | undefined;
  let pending = '';
  for (;;) {
    const { tasks } = (await cli.call('GET', `/v1/jobs/${seg(jobId)}`)).json as {
      tasks: Task[];
    };
    const now = tasks.find((t) => t.id === task.id) ?? task;
    // A new attempt starts its log afresh.
    if (attempt !== undefined && String(now.attempt) !== attempt) {
      offset = 0;
      cli.io.out(`--- attempt ${now.attempt} ---`);
    }
    const read = await readPages(cli, task.id, String(now.attempt), offset);
    attempt = String(now.attempt);
    // Whole lines only, so that a line is never printed in two halves.
    pending += read.text;
    const cut = pending.lastIndexOf('\n');
    if (cut >= 0) {
      cli.io.out(pending.slice(0, cut));
      pending = pending.slice(cut + 1);
    }
    offset = read.end;
    if (!unfinished(now.state)) {
      if (pending) cli.io.out(pending);
      return;
    }
    await sleep(1000);
  }
}
