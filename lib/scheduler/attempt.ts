import type { Queryable } from '../db/index.ts';
import type { AttemptOutcome, TaskState } from '../states.ts';
import { skipReachable } from './progress.ts';
import type { TaskRow } from './types.ts';

export interface AttemptEnd {
  /** The task's next state: 'queued' again, or a final one. */
  state: TaskState;
  /** How the attempt ended, as task_attempts records it. */
  outcome: AttemptOutcome;
  transient: boolean;
  error: string | null;
  /** Recorded on the task and the attempt when the runner reported one; undefined leaves the task's. */
  exitCode?: number | null;
  /** What the runner reported, kept so a repeated completion is recognised. */
  reported?: string;
}

/**
 * Ends the current attempt of a running task the caller holds locked: the
 * task goes back to the queue or to its final state, the attempt is closed,
 * and a failure (not allowed to fail) or a cancel skips everything reachable
 * from the task. Used by a completion and by the sweep alike. Answers how
 * many tasks were skipped.
 */
export async function endAttemptTx(tx: Queryable, task: TaskRow, end: AttemptEnd): Promise<number> {
  const keepExitCode = end.exitCode === undefined;
  if (end.state === 'queued') {
    await tx.query(
      `update tasks set state = 'queued', lease_id = null, worker_id = null,
                        lease_expires_at = null, queued_at = now(), error = $2,
                        exit_code = case when $3 then exit_code else $4 end
        where id = $1`,
      [task.id, end.error, keepExitCode, end.exitCode ?? null],
    );
  } else {
    await tx.query(
      `update tasks set state = $2, lease_expires_at = null, finished_at = now(), error = $3,
                        exit_code = case when $4 then exit_code else $5 end
        where id = $1`,
      [task.id, end.state, end.error, keepExitCode, end.exitCode ?? null],
    );
  }
  await tx.query(
    `update task_attempts
        set outcome = $3, reported_outcome = $4, result_state = $5, transient = $6,
            exit_code = $7, error = $8, finished_at = now()
      where task_id = $1 and attempt = $2`,
    [
      task.id,
      task.attempt,
      end.outcome,
      end.reported ?? null,
      end.state,
      end.transient,
      end.exitCode ?? null,
      end.error,
    ],
  );
  if (end.state === 'cancelled' || (end.state === 'failed' && !task.allow_failure)) {
    return skipReachable(
      tx,
      [task.id],
      `skipped: ${task.name} ${end.state === 'failed' ? 'failed' : 'was cancelled'}`,
    );
  }
  return 0;
}
