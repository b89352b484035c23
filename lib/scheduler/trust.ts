// The two moves of a job's trust that happen outside the webhook: settling a
// trust the forge had to confirm (the compile asks, outside any transaction,
// and settles here), and approving a blocked job. Approval never changes
// trust: an approved job runs untrusted.
import { type Pool, transaction } from '../db/index.ts';
import { ConflictError, NotFoundError } from '../errors.ts';
import type { JobState } from '../states.ts';
import { getJob } from './jobs.ts';
import { enqueueStatus, WAITING_FOR_APPROVAL } from './outbox.ts';
import type { JobRow } from './types.ts';

/**
 * Records what the forge said about a pending job whose trust needed
 * confirming: trusted, or untrusted and then, by the project's
 * fork_pull_requests, still pending ('run'), blocked ('approve') or cancelled
 * ('ignore'). Answers the job's state after it, or null when there was nothing
 * to settle (another compile of the same job settled it, or it left pending).
 */
export async function settleJobTrust(
  pool: Pool,
  jobId: string,
  verdict: { trusted: boolean; reason: string },
): Promise<JobState | null> {
  return transaction(pool, async (tx) => {
    // Conditional on pending with something to confirm: of two compiles of
    // the same job, the second matches nothing here and goes on with what the
    // first settled.
    const { rows } = await tx.query<{ state: JobState }>(
      `update jobs j
          set trusted = $2, confirm_writers = null, trust_reason = $3,
              state = case when $2 or p.fork_pull_requests = 'run' then 'pending'
                           when p.fork_pull_requests = 'approve' then 'blocked'
                           else 'cancelled' end,
              finished_at = case when not $2 and p.fork_pull_requests = 'ignore' then now() end,
              error = case when not $2 and p.fork_pull_requests = 'ignore' then $4 else j.error end
         from projects p
        where j.id = $1 and p.id = j.project_id and j.state = 'pending'
          and j.confirm_writers is not null
       returning j.state`,
      [
        jobId,
        verdict.trusted,
        verdict.reason,
        `not run (the project ignores untrusted pull requests): ${verdict.reason}`,
      ],
    );
    const state = rows[0]?.state ?? null;
    if (state === 'blocked') await enqueueStatus(tx, jobId, 'pending', WAITING_FOR_APPROVAL);
    if (state === 'cancelled') {
      await enqueueStatus(tx, jobId, 'error', `not run: ${verdict.reason}`);
    }
    return state;
  });
}

/**
 * Lets a blocked job go on: it is pending again and the caller dispatches its
 * compile. It stays untrusted. A job that is not blocked is a ConflictError.
 */
export async function approveJob(pool: Pool, jobId: string): Promise<JobRow> {
  return transaction(pool, async (tx) => {
    // A cancel (a decline) that commits first makes this conflict and retry,
    // and the retry finds the job cancelled.
    const { rows } = await tx.query<JobRow>(
      `update jobs set state = 'pending', approved_at = now(), dispatched_at = now()
        where id = $1 and state = 'blocked'
       returning *`,
      [jobId],
    );
    const approved = rows[0];
    if (approved) {
      // Held back as a new job's is: the compile that follows replaces it.
      await enqueueStatus(tx, jobId, 'pending', 'approved; waiting for the pipeline to be read', 5);
      return approved;
    }
    const job = await getJob(tx, jobId);
    if (!job) throw new NotFoundError(`job ${jobId} does not exist`);
    throw new ConflictError(
      `job #${job.number} is ${job.state}; only a blocked job can be approved`,
    );
  });
}
