import { type Pool, prepared, statementWithStats, TransactionConflictError } from '../db/index.ts';
import { DEFAULT_LEASE_S, type TaskRow } from './types.ts';

export interface ClaimOptions {
  leaseS?: number;
  /** Immediate retries on a deadlock before answering "nothing claimable". Default 10. */
  retries?: number;
  /** Called with the retries each claim took (metrics, the benchmark). */
  onRetries?: (retries: number) => void;
}

/** A claimed task with the facts about its job and project a runner needs. */
export interface ClaimedTask extends TaskRow {
  project_id: string;
  sha: string;
  ref: string;
  trusted: boolean;
  repo_url: string;
  /** The project's sealed forge token (lib/secrets), or null. */
  forge_token_enc: string | null;
  /** The outputs of the tasks this one needs: task name → output name → value. */
  needs_outputs: Record<string, Record<string, string>>;
}

// One statement, committed on its own. The choice of task is
// conductor_claim_candidate (migrations/002): the oldest job's queued task the
// labels allow, FOR UPDATE SKIP LOCKED, so rows other claimers hold right now
// are passed over. At READ COMMITTED a row another claimer took and committed
// after this statement began is re-checked (EvalPlanQual), fails
// `state = 'queued'`, and is passed over too; at REPEATABLE READ it would raise
// 40001 instead, about once per claim at 64 claimers (see docs/scheduling.md).
// A cancel changes the job and its queued tasks in one commit, so the re-check
// on the task row also covers the job. The outputs of the tasks it needs are
// final before a task is queued, so reading them here is reading them after.
const CLAIM = `
  with candidate as (
    select conductor_claim_candidate($2::text[]) as id
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
  select c.*, j.project_id, j.sha, j.ref, j.trusted, p.repo_url, p.forge_token_enc,
         case when cardinality(c.needs) = 0 then '{}'::jsonb else coalesce((
           select jsonb_object_agg(x.name, x.outputs)
             from (select n.name, jsonb_object_agg(o.name, o.value) as outputs
                     from task_needs e
                     join tasks n on n.id = e.need_id
                     join task_outputs o on o.task_id = n.id
                    where e.task_id = c.id
                    group by n.name) x
         ), '{}'::jsonb) end as needs_outputs
    from claimed c
    join jobs j on j.id = c.job_id
    join projects p on p.id = j.project_id`;

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
    const { result, retries } = await statementWithStats<ClaimedTask>(
      pool,
      prepared('conductor_claim', CLAIM, [workerId, labels, leaseS]),
      // A single statement at READ COMMITTED never sees 40001; the retries
      // stay for a deadlock (possible only through foreign-key locks), and a
      // claim that still loses answers null.
      { maxRetries: opts.retries ?? 10 },
    );
    opts.onRetries?.(retries);
    return result.rows[0] ?? null;
  } catch (err) {
    if (err instanceof TransactionConflictError) {
      opts.onRetries?.(err.retries);
      return null;
    }
    throw err;
  }
}
