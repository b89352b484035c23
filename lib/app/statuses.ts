// Delivering commit statuses from the outbox to GitHub and Gitea, outside any
// transaction: right after the change that wrote them commits (best effort),
// and from the sweep for whatever is still due, with exponential backoff, until
// a bounded time has passed. Only a job's newest row is posted; rows of one job
// are never posted concurrently, so a late delivery never overwrites a newer
// state, and posting the same state twice is harmless to the forge.
import type { AppContext } from '../context.ts';
import { type Pool, transaction } from '../db/index.ts';
import {
  apiBase,
  callForge,
  type ForgeAnswer,
  ForgeRefusedError,
  ForgeTransportError,
  forgeHeaders,
  transportErrorText,
} from '../forge/client.ts';
import { openGate } from '../idle/gate.ts';
import { log } from '../log.ts';
import { signJobLink } from '../pages/access.ts';
import type { Keyring } from '../secrets.ts';
import { forgeToken, getProjectRow } from './projects.ts';

export interface DeliveryOptions {
  githubApiUrl: string;
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

// How long a deliverer may hold a job's row while the forge answers.
const CLAIM_S = 60;
const BACKOFF_BASE_S = 5;
const BACKOFF_CAP_S = 600;

interface Claimed {
  id: number;
  job_id: string;
  state: string;
  description: string;
  attempts: number;
  created_at: Date;
  sha: string;
  project_id: string;
  pipeline_name: string | null;
}

/**
 * Claims the newest open row of the commit a job builds, superseding the older
 * ones; null when it is not due yet or another deliverer holds one. The forge
 * keeps one status per commit and context, which every job of that commit
 * shares (a rerun, a manual run of the same commit, the job it superseded), so
 * rows are ordered per commit, not per job.
 */
async function claim(
  pool: Pool,
  jobId: string,
): Promise<{ row: Claimed | null; superseded: number }> {
  return transaction(
    pool,
    async (tx) => {
      // Locking the commit's open rows serialises its deliverers.
      const { rows } = await tx.query<{ id: number; claimed: boolean; due: boolean }>(
        `select o.id, coalesce(o.claimed_until > now(), false) as claimed,
                o.next_attempt_at <= now() as due
           from jobs me
           join jobs j on j.project_id = me.project_id and j.sha = me.sha
           join status_outbox o on o.job_id = j.id and o.result is null
          where me.id = $1
          order by o.id
          for update of o`,
        [jobId],
      );
      if (rows.length === 0 || rows.some((r) => r.claimed)) return { row: null, superseded: 0 };
      const newest = rows[rows.length - 1]!;
      const older = rows.slice(0, -1).map((r) => r.id);
      if (older.length > 0) {
        await tx.query(
          `update status_outbox set result = 'superseded', done_at = now() where id = any($1::bigint[])`,
          [older],
        );
      }
      if (!newest.due) return { row: null, superseded: older.length };
      const claimed = await tx.query<Claimed>(
        `update status_outbox o
            set claimed_until = now() + make_interval(secs => $2), attempts = o.attempts + 1
           from jobs j
          where o.id = $1 and j.id = o.job_id
          returning o.id, o.job_id, o.state, o.description, o.attempts, o.created_at, j.sha,
                    j.project_id, j.pipeline_name`,
        [newest.id, CLAIM_S],
      );
      return { row: claimed.rows[0] ?? null, superseded: older.length };
    },
    { isolation: 'read committed' },
  );
}

async function finish(
  pool: Pool,
  id: number,
  outcome:
    | { result: 'delivered' | 'gave_up'; error?: string }
    | { retryInS: number; error: string },
): Promise<void> {
  await transaction(pool, (tx) =>
    'result' in outcome
      ? tx.query(
          `update status_outbox set result = $2, done_at = now(), claimed_until = null, last_error = $3
            where id = $1`,
          [id, outcome.result, outcome.error ?? null],
        )
      : tx.query(
          `update status_outbox
              set claimed_until = null, last_error = $2,
                  next_attempt_at = now() + make_interval(secs => $3)
            where id = $1`,
          [id, outcome.error, outcome.retryInS],
        ),
  );
}

class PermanentError extends Error {}

/** Posts one status to the project's forge; throws PermanentError for a refusal that retrying cannot fix. */
async function post(
  pool: Pool,
  keyring: Keyring,
  row: Claimed,
  opts: DeliveryOptions,
): Promise<void> {
  const project = await getProjectRow(pool, row.project_id);
  const token = project ? forgeToken(keyring, project) : null;
  if (!project || !token) throw new PermanentError('the project has no forge token');
  const [owner, name] = project.repo.split('/').map(encodeURIComponent);
  const base = apiBase(project.forge, {
    githubApiUrl: opts.githubApiUrl,
    forgeUrl: project.forge_url,
  });
  if (base === null) throw new PermanentError('the project has no forge_url');
  const url = `${base}/repos/${owner}/${name}/statuses/${row.sha}`;
  const body = {
    state: row.state,
    context: row.pipeline_name ? `conductor/${row.pipeline_name}` : 'conductor',
    description: row.description,
    ...(opts.publicUrl
      ? {
          target_url: `${opts.publicUrl.replace(/\/+$/, '')}/jobs/${row.job_id}?sig=${signJobLink(keyring, row.job_id)}`,
        }
      : {}),
  };
  const timeoutMs = opts.timeoutMs ?? 10_000;
  let res: ForgeAnswer;
  try {
    res = await callForge({
      method: 'POST',
      url,
      headers: { ...forgeHeaders(project.forge, token), 'Content-Type': 'application/json' },
      body: JSON.stringify(body),
      timeoutMs,
    });
  } catch (err) {
    // An address the control plane may not call, or a redirect: the
    // project's URL is wrong, and retrying will not right it.
    if (err instanceof ForgeRefusedError) throw new PermanentError(err.message);
    if (err instanceof ForgeTransportError) {
      throw new Error(
        `could not reach ${project.forge} at ${url}: ${transportErrorText(err, timeoutMs)}`,
      );
    }
    throw err;
  }
  if (res.kind === 'ok') return;
  const message = `${project.forge} answered HTTP ${res.status} for ${url}`;
  // A refusal (bad token, no such repository or commit) stays a refusal;
  // rate limits and server errors pass.
  if (res.kind === 'permanent') throw new PermanentError(message);
  throw new Error(message);
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
  const jobs = opts.jobId
    ? [opts.jobId]
    : (
        await pool.query<{ job_id: string }>(
          `select distinct job_id from (
             select job_id from status_outbox
              where result is null and next_attempt_at <= now()
              order by next_attempt_at limit $1) due`,
          [opts.limit ?? 50],
        )
      ).rows.map((r) => r.job_id);

  for (const jobId of jobs) {
    try {
      const { row, superseded } = await claim(pool, jobId);
      summary.statuses_superseded += superseded;
      if (!row) continue;
      try {
        await post(pool, keyring, row, opts);
        await finish(pool, row.id, { result: 'delivered' });
        summary.statuses_delivered++;
      } catch (err) {
        const error = err instanceof Error ? err.message : String(err);
        const age = (Date.now() - row.created_at.getTime()) / 1000;
        if (err instanceof PermanentError || age >= giveUpAfterS) {
          await finish(pool, row.id, { result: 'gave_up', error });
          summary.statuses_given_up++;
          log('warn', 'gave up posting a commit status', { job_id: jobId, err });
        } else {
          const retryInS = Math.min(BACKOFF_CAP_S, BACKOFF_BASE_S * 2 ** (row.attempts - 1));
          await finish(pool, row.id, { retryInS, error });
          summary.statuses_failed++;
        }
      }
    } catch (err) {
      log('error', 'delivering commit statuses failed', { job_id: jobId, err });
    }
  }
  return summary;
}

/** How statuses are posted, from the configuration. */
export function statusOptions(ctx: AppContext) {
  return {
    githubApiUrl: ctx.config.CONDUCTOR_GITHUB_API_URL,
    ...(ctx.config.CONDUCTOR_PUBLIC_URL ? { publicUrl: ctx.config.CONDUCTOR_PUBLIC_URL } : {}),
    giveUpAfterS: ctx.config.CONDUCTOR_STATUS_GIVE_UP_H * 3600,
  };
}

/** Posts a job's newest status right after the change that wrote it committed; never throws. */
export async function deliverJobStatus(ctx: AppContext, jobId: string): Promise<void> {
  // A status row just committed is work for the sweep if this post fails
  // (a blocked or declined job's may be the only work there is): open the
  // idle gate first (lib/idle/gate.ts).
  await openGate(ctx.gate);
  try {
    // A short timeout: the caller answers after this, and the sweep retries.
    await deliverStatuses(ctx.pool, ctx.keyring, {
      ...statusOptions(ctx),
      jobId,
      timeoutMs: 5_000,
    });
  } catch (err) {
    log('warn', 'posting a commit status failed; the sweep will retry', { job_id: jobId, err });
  }
}
