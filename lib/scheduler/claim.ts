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

// One statement, committed on its own: conductor_claim (migrations/002) locks
// the oldest job's queued task the labels allow (FOR UPDATE SKIP LOCKED, at
// READ COMMITTED, so a task another claimer took meanwhile is re-checked and
// passed over instead of raising 40001 as it would at REPEATABLE READ; see
// docs/scheduling.md), sets it running under a new attempt and lease, and then
// reads the job, the project and the outputs of the task's needs with a
// snapshot newer than its lock.
/** The columns of a ClaimedTask, from a `conductor_claim(...) c` row. */
export const CLAIMED_COLUMNS = `(c.task).*, c.project_id, c.sha, c.ref, c.trusted, c.repo_url,
  c.forge_token_enc, c.needs_outputs`;

const CLAIM = `select ${CLAIMED_COLUMNS} from conductor_claim($1, $2::text[], $3) c`;

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
      // At READ COMMITTED the claim never sees 40001; the retries stay for a
      // deadlock, and a claim that still loses answers null.
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
