// Delivering commit statuses from the outbox (lib/scheduler/outbox.ts) to
// the forges (lib/forge/statuses.ts), or as check runs for a project served
// by the GitHub App (lib/app/check-runs.ts), outside any transaction: right
// after the change that wrote them commits (best effort), and from the sweep
// for whatever is still due, with exponential backoff, until a bounded time
// has passed. Only the newest row of a commit and context is posted; rows of
// one commit and context are never posted concurrently, so a late delivery
// never overwrites a newer state, and posting the same state twice is
// harmless to the forge.
import type { AppContext } from '../context.ts';
import type { Pool } from '../db/index.ts';
import { postStatus, StatusRefusedError } from '../forge/statuses.ts';
import { openGate } from '../idle/gate.ts';
import { log } from '../log.ts';
import { signJobLink } from '../pages/access.ts';
import {
  type ClaimedStatus,
  claimStatus,
  finishStatus,
  jobsWithStatusesDue,
  shortDescription,
} from '../scheduler/outbox.ts';
import type { Keyring } from '../secrets.ts';
import { postCheckRun } from './check-runs.ts';
import type { AppConfig } from './forge-token.ts';
import { forgeToken, getProjectRow } from './projects.ts';
import { describeTests, testTotals } from './test-totals.ts';

export interface DeliveryOptions {
  githubApiUrl: string;
  /** The GitHub App's settings: a project it serves gets check runs instead of statuses. */
  config?: AppConfig;
  /** With it, each status links to `<publicUrl>/jobs/<id>?sig=...` (a signed link, lib/pages/access.ts). */
  publicUrl?: string;
  /** After this long since a row was written, it is given up. Default 24 h. */
  giveUpAfterS?: number;
  /** Only this job's rows (the post-commit delivery). */
  jobId?: string;
  /** Most jobs handled in one call. Default 50. */
  limit?: number;
  timeoutMs?: number;
}

export interface DeliverySummary {
  statuses_delivered: number;
  statuses_superseded: number;
  statuses_failed: number;
  statuses_given_up: number;
}

const BACKOFF_BASE_S = 5;
const BACKOFF_CAP_S = 600;

/** Reads the project, opens its token and posts the claimed row's status to its forge. */
async function post(
  pool: Pool,
  keyring: Keyring,
  row: ClaimedStatus,
  opts: DeliveryOptions,
): Promise<void> {
  const project = await getProjectRow(pool, row.project_id);
  const link = opts.publicUrl
    ? `${opts.publicUrl.replace(/\/+$/, '')}/jobs/${row.job_id}?sig=${signJobLink(keyring, row.job_id)}`
    : undefined;
  if (project?.github_app && opts.config) {
    await postCheckRun({ config: opts.config, pool, keyring }, project, row, {
      ...(link ? { detailsUrl: link } : {}),
      timeoutMs: opts.timeoutMs ?? 10_000,
    });
    return;
  }
  const token = project ? forgeToken(keyring, project) : null;
  if (!project || !token) throw new StatusRefusedError('the project has no forge token');
  // A finished job whose tasks reported tests says how the tests went first.
  let description = row.description;
  if (row.state === 'success' || row.state === 'failure') {
    const tests = await testTotals({ pool }, row.job_id);
    if (tests) description = shortDescription(`${describeTests(tests)}; tasks ${description}`);
  }
  await postStatus(
    {
      forge: project.forge,
      repo: project.repo,
      forgeUrl: project.forge_url,
      githubApiUrl: opts.githubApiUrl,
      token,
    },
    {
      sha: row.sha,
      state: row.state,
      pipelineName: row.pipeline_name,
      trusted: row.trusted,
      description,
      ...(link ? { targetUrl: link } : {}),
    },
    opts.timeoutMs ?? 10_000,
  );
}

/** Delivers what is due: one job's rows after a commit, or every due job's from the sweep. */
export async function deliverStatuses(
  pool: Pool,
  keyring: Keyring,
  opts: DeliveryOptions,
): Promise<DeliverySummary> {
  const summary: DeliverySummary = {
    statuses_delivered: 0,
    statuses_superseded: 0,
    statuses_failed: 0,
    statuses_given_up: 0,
  };
  const giveUpAfterS = opts.giveUpAfterS ?? 24 * 3600;
  const jobs = opts.jobId ? [opts.jobId] : await jobsWithStatusesDue(pool, opts.limit ?? 50);

  for (const jobId of jobs) {
    // A row written while another of its commit was in flight finds that
    // row claimed and is left; so each deliverer, once its post is done,
    // takes what has become due since (at most a few rows), instead of
    // leaving a job's final status to the next sweep.
    for (let round = 0; round < ROWS_PER_JOB; round++) {
      if (!(await deliverOne(pool, keyring, opts, jobId, giveUpAfterS, summary))) break;
    }
  }
  return summary;
}

/** How many rows one delivery takes for a job, one after another. */
const ROWS_PER_JOB = 5;

/** Claims and posts a job's next due row; answers whether one was delivered. */
async function deliverOne(
  pool: Pool,
  keyring: Keyring,
  opts: DeliveryOptions,
  jobId: string,
  giveUpAfterS: number,
  summary: DeliverySummary,
): Promise<boolean> {
  try {
    const { row, superseded } = await claimStatus(pool, jobId);
    summary.statuses_superseded += superseded;
    if (!row) return false;
    try {
      await post(pool, keyring, row, opts);
      await finishStatus(pool, row.id, { result: 'delivered' });
      summary.statuses_delivered++;
      return true;
    } catch (err) {
      const error = err instanceof Error ? err.message : String(err);
      const age = (Date.now() - row.created_at.getTime()) / 1000;
      if (err instanceof StatusRefusedError || age >= giveUpAfterS) {
        await finishStatus(pool, row.id, { result: 'gave_up', error });
        summary.statuses_given_up++;
        log('warn', 'gave up posting a commit status', { job_id: jobId, err });
      } else {
        const retryInS = Math.min(BACKOFF_CAP_S, BACKOFF_BASE_S * 2 ** (row.attempts - 1));
        await finishStatus(pool, row.id, { retryInS, error });
        summary.statuses_failed++;
      }
      return false;
    }
  } catch (err) {
    log('error', 'delivering commit statuses failed', { job_id: jobId, err });
    return false;
  }
}

/** How statuses are posted, from the configuration. */
export function statusOptions(ctx: AppContext) {
  return {
    githubApiUrl: ctx.config.CONDUCTOR_GITHUB_API_URL,
    config: ctx.config,
    ...(ctx.config.CONDUCTOR_PUBLIC_URL ? { publicUrl: ctx.config.CONDUCTOR_PUBLIC_URL } : {}),
    giveUpAfterS: ctx.config.CONDUCTOR_STATUS_GIVE_UP_H * 3600,
  };
}

/**
 * Posts a job's newest status right after the change that wrote it committed;
 * never throws. Answers what it delivered, or undefined when it failed (the
 * sweep retries).
 */
export async function deliverJobStatus(
  ctx: AppContext,
  jobId: string,
): Promise<DeliverySummary | undefined> {
  // A status row just committed is work for the sweep if this post fails
  // (a blocked or declined job's may be the only work there is): open the
  // idle gate first (lib/idle/gate.ts).
  await openGate(ctx.gate);
  try {
    // A short timeout: the caller answers after this, and the sweep retries.
    return await deliverStatuses(ctx.pool, ctx.keyring, {
      ...statusOptions(ctx),
      jobId,
      timeoutMs: 5_000,
    });
  } catch (err) {
    log('warn', 'posting a commit status failed; the sweep will retry', { job_id: jobId, err });
    return undefined;
  }
}
