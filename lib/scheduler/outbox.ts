// Commit statuses are written to an outbox in the same transaction as the job
// state change they report, so a status is never lost and never posted for a
// change that rolled back. lib/app/statuses.ts delivers them after the commit,
// claiming and finishing rows with the statements below.
import { type Pool, type Queryable, transaction } from '../db/index.ts';
import type { StatusState } from '../states.ts';

/** The status of a job held for approval: `pending` on the forge, with this description. */
export const WAITING_FOR_APPROVAL = 'waiting for approval';

/** The forge limits a status description to 140 characters. */
export function shortDescription(text: string): string {
  const line = text.replace(/\s+/g, ' ').trim();
  return line.length <= 140 ? line : `${line.slice(0, 139)}…`;
}

/**
 * Records a status to post for a job. Nothing is recorded for a project
 * without a forge token (or the GitHub App) or with a local repository: there
 * is no forge to tell.
 * `delayS` holds a row back so a quick follow-up can supersede it.
 */
export async function enqueueStatus(
  tx: Queryable,
  jobId: string,
  state: StatusState,
  description: string,
  delayS = 0,
): Promise<void> {
  await tx.query(
    `insert into status_outbox (job_id, state, description, next_attempt_at)
     select j.id, $2, $3, now() + make_interval(secs => $4)
       from jobs j join projects p on p.id = j.project_id
      where j.id = $1 and (p.forge_token_enc is not null or p.github_app)
        and p.repo_url ~ '^https?://'`,
    [jobId, state, shortDescription(description), delayS],
  );
}

// How long a deliverer may hold a job's row while the forge answers.
const CLAIM_S = 60;

/** An outbox row claimed for delivery, with what posting it needs. */
export interface ClaimedStatus {
  id: number;
  job_id: string;
  state: string;
  description: string;
  attempts: number;
  created_at: Date;
  sha: string;
  project_id: string;
  pipeline_name: string | null;
  /** The job's trust: an untrusted job's status has a context of its own (lib/forge/statuses.ts). */
  trusted: boolean;
}

/** The jobs with a status row due, oldest due first, at most `limit`. */
export async function jobsWithStatusesDue(db: Queryable, limit: number): Promise<string[]> {
  const { rows } = await db.query<{ job_id: string }>(
    `select distinct job_id from (
       select job_id from status_outbox
        where result is null and next_attempt_at <= now()
        order by next_attempt_at limit $1) due`,
    [limit],
  );
  return rows.map((r) => r.job_id);
}

/**
 * Claims the newest open row of the commit and context a job reports on,
 * superseding the older ones; null when it is not due yet or another
 * deliverer holds one. The forge keeps one status per commit and context,
 * which every job of that commit and trust shares (a rerun, a manual run of
 * the same commit, the job it superseded), so rows are ordered per commit and
 * trust, not per job. Trusted and untrusted jobs post under different
 * contexts, so neither orders, supersedes nor waits for the other: a fork's
 * pull request on a commit of main never replaces main's status.
 */
export async function claimStatus(
  pool: Pool,
  jobId: string,
): Promise<{ row: ClaimedStatus | null; superseded: number }> {
  return transaction(
    pool,
    async (tx) => {
      // Locking the open rows of the commit and context (of the job, for a
      // GitHub App project's check runs) serialises their deliverers. A job's trust changes once at most: a pending job whose
      // writers Gitea has yet to confirm (confirm_writers) is settled trusted
      // or not by its compile. Until then its rows have no context and wait
      // (a compile that fails ends the job, and they go as untrusted); after,
      // its trust is final, so a row is posted in the context it was ordered in.
      const { rows } = await tx.query<{ id: number; claimed: boolean; due: boolean }>(
        `select o.id, coalesce(o.claimed_until > now(), false) as claimed,
                o.next_attempt_at <= now() as due
           from jobs me
           join projects p on p.id = me.project_id
           join jobs j on j.project_id = me.project_id and j.sha = me.sha
                      and j.trusted = me.trusted
                      and not (j.state = 'pending' and j.confirm_writers is not null)
                      -- A GitHub App project reports each job as a check run of
                      -- its own: its rows are ordered per job, never superseded
                      -- by another job's (which would leave a run in progress).
                      and (j.id = me.id or not p.github_app)
           join status_outbox o on o.job_id = j.id and o.result is null
          where me.id = $1 and not (me.state = 'pending' and me.confirm_writers is not null)
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
      const claimed = await tx.query<ClaimedStatus>(
        `update status_outbox o
            set claimed_until = now() + make_interval(secs => $2), attempts = o.attempts + 1
           from jobs j
          where o.id = $1 and j.id = o.job_id
          returning o.id, o.job_id, o.state, o.description, o.attempts, o.created_at, j.sha,
                    j.project_id, j.pipeline_name, j.trusted`,
        [newest.id, CLAIM_S],
      );
      return { row: claimed.rows[0] ?? null, superseded: older.length };
    },
    { isolation: 'read committed' },
  );
}

/** Ends a claimed row: delivered or given up, or back to wait `retryInS` for the next try. */
export async function finishStatus(
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
