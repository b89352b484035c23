// A job's check run (issue #53): created by the first status row the outbox
// delivers for a job of a project served by the GitHub App, updated by the
// next (lib/app/statuses.ts calls postCheckRun after the commit that wrote the
// row), with the job's summary: how its tests went and the first failed tests
// (when its tasks reported tests), its tasks, their states and durations, the
// last lines of the first failure's log, and the link to the job's page. An
// untrusted job's run has a name of its own, as its status has a context of
// its own (lib/forge/statuses.ts statusContext).
import type { Pool, Queryable } from '../db/index.ts';
import {
  callForge,
  type ForgeAnswer,
  ForgeRefusedError,
  ForgeTransportError,
  forgeCall,
} from '../forge/client.ts';
import {
  type CheckRunBody,
  checkRunId,
  createCheckRun,
  RERUN_ACTION,
  updateCheckRun,
} from '../forge/github/app.ts';
import { github } from '../forge/github/index.ts';
import { StatusRefusedError, statusContext } from '../forge/statuses.ts';
import { jobTestRows, sumTotals } from '../reports/rows.ts';
import { getJobView } from '../scheduler/views.ts';
import type { Keyring } from '../secrets.ts';
import { type AppConfig, projectToken } from './forge-token.ts';
import type { ProjectRow } from './projects.ts';
import { describeTests } from './test-totals.ts';
import { readTaskLog } from './views.ts';

/** The most log lines of the first failure a check run shows. */
export const CHECK_LOG_LINES = 30;

/** The most failed tests a check run's summary names; the job's page has them all. */
export const CHECK_FAILED_TESTS = 10;

// GitHub takes at most 65,535 characters in a check run's summary and text.
const MAX_CHECK_TEXT = 60_000;

function duration(start: Date | null, end: Date | null): string {
  if (!start) return '–';
  const s = Math.max(0, Math.round(((end ?? new Date()).getTime() - start.getTime()) / 1000));
  return s < 60 ? `${s}s` : `${Math.floor(s / 60)}m ${s % 60}s`;
}

const cell = (text: string) => text.replace(/[|\n\r]/g, ' ').slice(0, 200);

/** Text a report controls, on one line, inside a code span that it cannot close. */
const code = (text: string, max: number) =>
  `\`${
    text
      .replace(/[\n\r]+/g, ' ')
      .replaceAll('`', "'")
      .trim()
      .slice(0, max) || ' '
  }\``;

/**
 * The summary's lines about the job's tests: the totals ("2 of 340 tests failed") and the
 * first CHECK_FAILED_TESTS failed or errored tests, each with its message's first line; null
 * when none of its tasks reported tests.
 */
async function testLines(
  db: Queryable,
  jobId: string,
): Promise<{ words: string; lines: string[] } | null> {
  const tasks = await jobTestRows(db, jobId);
  if (tasks.length === 0) return null;
  const totals = sumTotals(tasks);
  const words = describeTests(totals);
  const lines = [`**Tests:** ${words}`, ''];
  const failed = tasks.flatMap((t) =>
    t.failures.filter((f) => f.kind !== 'passed').map((f) => ({ task: t.task_name, ...f })),
  );
  if (failed.length > 0) {
    for (const f of failed.slice(0, CHECK_FAILED_TESTS)) {
      const name = [f.classname ?? f.suite, f.name].filter(Boolean).join(' › ');
      const first = f.message.split('\n').find((l) => l.trim() !== '') ?? '';
      lines.push(
        `- ${code(name, 200)}${first ? ` ${code(first, 200)}` : ''} (${f.kind} in ${cell(f.task)})`,
      );
    }
    // The totals count every failure; a report keeps at most REPORT_MAX_FAILURES of them.
    const more = totals.failed + totals.errored - Math.min(failed.length, CHECK_FAILED_TESTS);
    if (more > 0) lines.push(`- … and ${more} more: see the job's page`);
    lines.push('');
  }
  return { words, lines };
}

/** A row of the outbox as the check run reports it (lib/app/statuses.ts). */
export interface CheckRow {
  job_id: string;
  state: string;
  description: string;
  sha: string;
  pipeline_name: string | null;
  trusted: boolean;
}

/** The check run's body for a job: its state, the table of its tasks, the first failure's last lines. */
export async function checkRunBody(
  db: Queryable,
  row: CheckRow,
  detailsUrl: string | undefined,
): Promise<CheckRunBody> {
  const { job, tasks } = await getJobView(db, row.job_id);
  const finished = row.state !== 'pending';
  const conclusion: CheckRunBody['conclusion'] =
    row.state === 'success'
      ? 'success'
      : job.state === 'cancelled'
        ? 'cancelled'
        : row.state === 'warning'
          ? 'neutral'
          : 'failure';
  const lines = [
    `**Job #${job.number}** · ${job.state} · ${job.ref} · ${duration(job.started_at, job.finished_at)}`,
    '',
  ];
  if (detailsUrl) lines.push(`[The job's page](${detailsUrl})`, '');
  const tests = finished ? await testLines(db, row.job_id) : null;
  if (tests) lines.push(...tests.lines);
  if (tasks.length > 0) {
    lines.push('| task | state | duration |', '|---|---|---|');
    for (const t of tasks.slice(0, 200)) {
      lines.push(`| ${cell(t.name)} | ${t.state} | ${duration(t.started_at, t.finished_at)} |`);
    }
    if (tasks.length > 200) lines.push(`| … ${tasks.length - 200} more | | |`);
  }
  let text: string | undefined;
  const failed = tasks.find((t) => t.state === 'failed');
  if (failed) {
    let tail = '';
    try {
      const size = (await readTaskLog(db, failed.id, undefined, 0, 1)).size;
      const page = await readTaskLog(db, failed.id, undefined, Math.max(0, size - 16_384));
      tail = page.text
        .split('\n')
        .filter((l, i, all) => l !== '' || i < all.length - 1)
        .slice(-CHECK_LOG_LINES)
        .join('\n');
    } catch {
      // No log (a task that failed before it ran): its error says why.
    }
    text = [
      `### ${failed.name} failed${failed.exit_code !== null ? ` (exit code ${failed.exit_code})` : ''}`,
      failed.error ? `\n${failed.error}\n` : '',
      tail ? `\`\`\`\n${tail.replaceAll('```', '`\u200b``')}\n\`\`\`` : '',
    ]
      .join('\n')
      .slice(0, MAX_CHECK_TEXT);
  }
  return {
    name: statusContext(row.pipeline_name, row.trusted),
    head_sha: row.sha,
    external_id: row.job_id,
    ...(detailsUrl ? { details_url: detailsUrl } : {}),
    status: finished ? 'completed' : job.state === 'running' ? 'in_progress' : 'queued',
    ...(finished ? { conclusion } : {}),
    ...(job.started_at ? { started_at: job.started_at.toISOString() } : {}),
    ...(finished ? { completed_at: (job.finished_at ?? new Date()).toISOString() } : {}),
    output: {
      // As the commit status says it (lib/app/statuses.ts): how the tests went first.
      title:
        (tests ? `${tests.words}; tasks ${row.description}` : row.description).slice(0, 200) ||
        job.state,
      summary: lines.join('\n').slice(0, MAX_CHECK_TEXT),
      ...(text ? { text } : {}),
    },
    ...(finished && conclusion !== 'success'
      ? {
          actions: [
            { label: 'Re-run', description: 'Run this job again', identifier: RERUN_ACTION },
          ],
        }
      : {}),
  };
}

/**
 * Creates the job's check run, or updates the one it has, with the row's
 * state. Refusals (no installation, a 4xx) are StatusRefusedError, given up
 * by the outbox; the rest may pass and are retried.
 */
export async function postCheckRun(
  deps: { config: AppConfig; pool: Pool; keyring: Keyring },
  project: ProjectRow,
  row: CheckRow,
  opts: { detailsUrl?: string; timeoutMs?: number },
): Promise<void> {
  const token = await projectToken(deps, project);
  if (!token) {
    throw new StatusRefusedError(
      `the GitHub App is not installed on ${project.repo} (or its installation is suspended)`,
    );
  }
  const api = github.apiBase({
    githubApiUrl: deps.config.CONDUCTOR_GITHUB_API_URL,
    forgeUrl: null,
  })!;
  const body = await checkRunBody(deps.pool, row, opts.detailsUrl);
  const { rows } = await deps.pool.query<{ check_run_id: string }>(
    'select check_run_id from github_check_runs where job_id = $1',
    [row.job_id],
  );
  const existing = rows[0] ? Number(rows[0].check_run_id) : null;
  const { head_sha: _sha, external_id: _ext, ...update } = body;
  const request =
    existing === null
      ? createCheckRun(api, project.repo, body)
      : updateCheckRun(api, project.repo, existing, update as CheckRunBody);
  const timeoutMs = opts.timeoutMs ?? 10_000;
  let res: ForgeAnswer;
  try {
    res = await callForge(forgeCall(github, token, request, { timeoutMs }));
  } catch (err) {
    if (err instanceof ForgeRefusedError) throw new StatusRefusedError(err.message);
    if (err instanceof ForgeTransportError) {
      throw new Error(`could not reach GitHub at ${request.url}: ${err.message}`);
    }
    throw err;
  }
  const message = `GitHub answered HTTP ${res.status} for ${request.method} ${request.url}`;
  if (res.kind === 'permanent') throw new StatusRefusedError(message);
  if (res.kind !== 'ok') throw new Error(message);
  if (existing !== null) return;
  let id: number | null = null;
  try {
    id = checkRunId(JSON.parse(res.body?.toString('utf8') ?? ''));
  } catch {
    id = null;
  }
  if (id === null) throw new StatusRefusedError(`${message}, without the check run's id`);
  // Rows of one job are never posted at once (lib/scheduler/outbox.ts), so
  // no other deliverer created a run meanwhile.
  await deps.pool.query(
    `insert into github_check_runs (job_id, check_run_id) values ($1, $2)
     on conflict (job_id) do update set check_run_id = excluded.check_run_id`,
    [row.job_id, id],
  );
}
