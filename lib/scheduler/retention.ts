// Retention: the sweep deletes old logs and old jobs in bounded batches, each
// its own short transaction, so one sweep stays short however much is due.
// Only finished jobs are touched (finished_at is set only on finished jobs).
import { type Pool, transaction } from '../db/index.ts';

export interface RetentionOptions {
  /** Logs of jobs finished longer ago than this are deleted. */
  logDays: number;
  /** Jobs finished longer ago than this are deleted with everything of theirs. */
  jobDays: number;
  /** Rows per batch. Default 1000. */
  batch?: number;
  /** Batches per kind per call. Default 5. */
  maxBatches?: number;
}

export interface RetentionSummary {
  log_chunks_purged: number;
  jobs_purged: number;
}

/** Deletes what retention allows, a bounded amount per call; answers how many rows went. */
export async function purgeExpired(pool: Pool, opts: RetentionOptions): Promise<RetentionSummary> {
  const batch = opts.batch ?? 1000;
  const maxBatches = opts.maxBatches ?? 5;
  const summary: RetentionSummary = { log_chunks_purged: 0, jobs_purged: 0 };

  for (let i = 0; i < maxBatches; i++) {
    const n = await transaction(
      pool,
      async (tx) => {
        const { rowCount } = await tx.query(
          `delete from log_chunks c
          using (select c2.task_id, c2.attempt, c2.byte_offset
                   from jobs j
                   join tasks t on t.job_id = j.id
                   join log_chunks c2 on c2.task_id = t.id
                  where j.finished_at < now() - make_interval(days => $1)
                  limit $2) doomed
          where c.task_id = doomed.task_id and c.attempt = doomed.attempt
            and c.byte_offset = doomed.byte_offset`,
          [opts.logDays, batch],
        );
        return rowCount ?? 0;
      },
      { isolation: 'read committed', statementTimeoutMs: 30_000 },
    );
    summary.log_chunks_purged += n;
    if (n < batch) break;
  }

  for (let i = 0; i < maxBatches; i++) {
    const n = await transaction(
      pool,
      async (tx) => {
        // Deleting a job cascades to its tasks, attempts, outputs, logs and
        // outbox rows; a batch of jobs is therefore kept smaller than of chunks.
        const { rowCount } = await tx.query(
          `delete from jobs where id in (
           select id from jobs
            where finished_at < now() - make_interval(days => $1)
            order by finished_at limit $2)`,
          [opts.jobDays, Math.max(1, Math.floor(batch / 10))],
        );
        return rowCount ?? 0;
      },
      { isolation: 'read committed', statementTimeoutMs: 30_000 },
    );
    summary.jobs_purged += n;
    if (n < Math.max(1, Math.floor(batch / 10))) break;
  }
  return summary;
}
