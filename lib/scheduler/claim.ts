import { type Pool, TransactionConflictError, transactionWithStats } from '../db/index.ts';
import { DEFAULT_LEASE_S, type TaskRow } from './types.ts';

export interface ClaimOptions {
  leaseS?: number;
  /** Immediate retries on 40001/40P01 before answering "nothing claimable". Default 10. */
  retries?: number;
  /** Called with the retries each claim took (metrics, the benchmark). */
  onRetries?: (retries: number) => void;
}

/** A claimed task with the facts about its job a runner needs. */
export interface ClaimedTask extends TaskRow {
  project_id: string;
  sha: string;
  ref: string;
  trusted: boolean;
}

/**
 * Claims at most one queued task of a running job whose labels are all among
 * `labels`, oldest job first, under a new attempt and lease. Answers null when
 * nothing is claimable, and also when every retry lost a race: a claimer that
 * keeps losing polls again rather than failing. An empty claim writes nothing.
 */
export async function claimTask(
  pool: Pool,
  workerId: string,
  labels: string[],
  opts: ClaimOptions = {},
): Promise<ClaimedTask | null> {
  const leaseS = opts.leaseS ?? DEFAULT_LEASE_S;
  try {
    const { value, retries } = await transactionWithStats(
      pool,
      async (tx) => {
        // SKIP LOCKED passes over rows other claimers hold right now. At READ
        // COMMITTED a row another claimer took and committed after this
        // statement began is re-checked (EvalPlanQual), fails `state =
        // 'queued'`, and is passed over too; at REPEATABLE READ it raises
        // 40001 instead, about once per claim at 64 claimers (see
        // docs/scheduling.md). A cancel changes the job and its queued tasks in
        // one commit, so the re-check on the task row also covers the job.
        const { rows } = await tx.query<ClaimedTask>(
          `with candidate as (
             select t.id
               from tasks t
              where t.state = 'queued'
                and t.labels <@ $2::text[]
                and exists (select 1 from jobs j where j.id = t.job_id and j.state = 'running')
              order by t.job_created_at, t.position
              limit 1
              for update of t skip locked
           ), claimed as (
             update tasks t
                set state = 'running',
                    attempt = t.attempt + 1,
                    lease_id = gen_random_uuid(),
                    worker_id = $1,
                    lease_expires_at = now() + make_interval(secs => $3),
                    started_at = coalesce(t.started_at, now())
               from candidate c
              where t.id = c.id
             returning t.*
           ), attempt as (
             insert into task_attempts (task_id, attempt, lease_id, worker_id)
             select id, attempt, lease_id, worker_id from claimed
           )
           select c.*, j.project_id, j.sha, j.ref, j.trusted
             from claimed c join jobs j on j.id = c.job_id`,
          [workerId, labels, leaseS],
        );
        return rows[0] ?? null;
      },
      // At READ COMMITTED the claim never sees 40001; the retries stay for a
      // deadlock (possible only through foreign-key locks), and a claim that
      // still loses answers null.
      { isolation: 'read committed', immediate: true, maxRetries: opts.retries ?? 10 },
    );
    opts.onRetries?.(retries);
    return value;
  } catch (err) {
    if (err instanceof TransactionConflictError) {
      opts.onRetries?.(err.retries);
      return null;
    }
    throw err;
  }
}
