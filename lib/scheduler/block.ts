// Block steps (`block:` in the pipeline): a task that runs no script and
// holds no runner. Promotion puts it in `blocked` (progress.ts); from there it
// is unblocked by a person (its fields become its outputs and it succeeds) or
// ended by the sweep once its deadline passes (failed or skipped, as its
// on_timeout says). Either way it is one conditional write on `blocked`, so an
// unblock racing the timeout or a cancel takes effect once.
import { type Pool, transaction } from '../db/index.ts';
import { ConflictError, NotFoundError, ValidationError, type ValidationIssue } from '../errors.ts';
import type { CompiledBlock } from '../pipeline/index.ts';
import { enqueueStatus } from './outbox.ts';
import { followUpAfterCommit, noteBlockedTx, skipReachable } from './progress.ts';
import type { TaskRow } from './types.ts';

/** Most characters one field's value may have. */
export const MAX_FIELD_CHARS = 4096;

/**
 * Checks the values given for a block's fields: every one named is a field,
 * every required one is given and not blank, a select's value is one of its
 * options. Answers the outputs to store, a missing optional field as ''.
 */
export function blockOutputs(
  block: CompiledBlock,
  given: Record<string, unknown>,
): Record<string, string> {
  const issues: ValidationIssue[] = [];
  const known = new Set(block.fields.map((field) => field.name));
  for (const name of Object.keys(given)) {
    if (!known.has(name)) {
      const fields = [...known].join(', ') || 'none';
      issues.push({
        path: `fields.${name}`,
        message: `no such field (this block asks for: ${fields})`,
      });
    }
  }
  const outputs: Record<string, string> = {};
  for (const field of block.fields) {
    const value = Object.hasOwn(given, field.name) ? given[field.name] : undefined;
    const path = `fields.${field.name}`;
    if (value !== undefined && typeof value !== 'string') {
      issues.push({ path, message: 'must be a string' });
      continue;
    }
    const text = value ?? '';
    if (field.required && text.trim() === '') {
      issues.push({ path, message: 'is required' });
    } else if (text.length > MAX_FIELD_CHARS) {
      issues.push({ path, message: `must be at most ${MAX_FIELD_CHARS} characters` });
    } else if (field.options && text !== '' && !field.options.includes(text)) {
      issues.push({ path, message: `must be one of ${field.options.join(', ')}` });
    }
    outputs[field.name] = text;
  }
  if (issues.length > 0) throw new ValidationError(issues);
  return outputs;
}

/**
 * Unblocks a blocked task of a job by its name: stores the fields as its
 * outputs, marks it succeeded by `who`, and promotes what needs it (after the
 * commit). A task that is not blocked is a ConflictError; bad fields a
 * ValidationError naming the field. The job's trust is left as it is.
 */
export async function unblockTask(
  pool: Pool,
  jobId: string,
  taskName: string,
  fields: Record<string, unknown>,
  who: string,
): Promise<TaskRow> {
  const task = await transaction(pool, async (tx) => {
    const { rows } = await tx.query<TaskRow & { job_number: number }>(
      `select t.*, j.number as job_number from tasks t join jobs j on j.id = t.job_id
        where t.job_id = $1 and t.name = $2`,
      [jobId, taskName],
    );
    const found = rows[0];
    if (!found) {
      const job = await tx.query('select 1 from jobs where id = $1', [jobId]);
      throw new NotFoundError(
        job.rowCount === 0
          ? `job ${jobId} does not exist`
          : `job ${jobId} has no task ${JSON.stringify(taskName)}`,
      );
    }
    if (found.state !== 'blocked' || found.block === null) {
      throw new ConflictError(
        `task ${JSON.stringify(taskName)} of job #${found.job_number} is ${found.state}; only a blocked task can be unblocked`,
      );
    }
    // Its deadline passed: it timed out, though the sweep has not ended it
    // yet (the update below re-checks it on the row it writes).
    const late = await tx.query(
      'select 1 from tasks where id = $1 and block_deadline is not null and block_deadline <= now()',
      [found.id],
    );
    if (late.rowCount) {
      throw new ConflictError(
        `task ${JSON.stringify(taskName)} of job #${found.job_number} timed out waiting for approval; it can no longer be unblocked`,
      );
    }
    const outputs = blockOutputs(found.block, fields);
    // Conditional on 'blocked' and the deadline: a cancel or the timeout that commits first
    // makes this conflict (40001) and the retry finds the task finished.
    const updated = await tx.query<TaskRow>(
      `update tasks set state = 'success', finished_at = now(), unblocked_by = $2,
                        unblocked_at = now(), block_deadline = null
        where id = $1 and state = 'blocked'
          and (block_deadline is null or block_deadline > now())
        returning *`,
      [found.id, who],
    );
    const row = updated.rows[0];
    if (!row) throw new ConflictError(`task ${JSON.stringify(taskName)} is no longer blocked`);
    const names = Object.keys(outputs);
    if (names.length > 0) {
      await tx.query(
        `insert into task_outputs (task_id, name, value)
         select $1, n, v from unnest($2::text[], $3::text[]) as o (n, v)`,
        [row.id, names, names.map((name) => outputs[name] ?? '')],
      );
    }
    await enqueueStatus(tx, jobId, 'pending', `${taskName} unblocked by ${who}; running`);
    await noteBlockedTx(tx, jobId);
    return row;
  });
  await followUpAfterCommit(pool, jobId, task.id);
  return task;
}

/**
 * Ends a blocked task whose deadline passed, as its on_timeout says (failed,
 * or skipped), and what needs it is skipped; re-checked under the row's lock.
 * Answers the job to follow up and how many tasks were skipped, or null when
 * it was unblocked or cancelled meanwhile.
 */
export async function timeOutBlock(
  pool: Pool,
  taskId: string,
  lockTimeoutMs?: number,
): Promise<{ jobId: string; failed: boolean; skipped: number } | null> {
  return transaction(
    pool,
    async (tx) => {
      const { rows } = await tx.query<{ job_id: string; name: string; on_timeout: string }>(
        `update tasks
            set state = case when block ->> 'onTimeout' = 'skip' then 'skipped' else 'failed' end,
                finished_at = now(), block_deadline = null,
                error = format('nobody unblocked it within %s; %s',
                               (block ->> 'timeoutS') || ' s',
                               case when block ->> 'onTimeout' = 'skip' then 'skipped (on_timeout: skip)'
                                    else 'failed (on_timeout: fail)' end)
          where id = $1 and state = 'blocked' and block_deadline < now()
          returning job_id, name, block ->> 'onTimeout' as on_timeout`,
        [taskId],
      );
      const row = rows[0];
      if (!row) return null;
      const failed = row.on_timeout !== 'skip';
      const skipped = await skipReachable(
        tx,
        [taskId],
        `skipped: ${row.name} ${failed ? 'failed' : 'did not run'}`,
      );
      return { jobId: row.job_id, failed, skipped };
    },
    { isolation: 'read committed', lockTimeoutMs },
  );
}

// Kept here for the callers that import it from this module.
export { noteBlockedTx } from './progress.ts';
