import { type Pool, transaction } from '../db/index.ts';
import { ConflictError, NotFoundError } from '../errors.ts';
import { FINISHED_JOB_STATES, type JobState } from '../states.ts';
import { createJobTx, getJob, insertTasksTx } from './jobs.ts';
import { enqueueStatus } from './outbox.ts';
import { followUpAfterCommit, noteBlockedTx } from './progress.ts';
import type { JobRow, TaskRow, TaskSpec } from './types.ts';

export interface RerunResult {
  job: JobRow;
  /** True when the new job must be compiled (the first never compiled); else it runs the first job's tasks. */
  dispatch: boolean;
  /** The new job's final state when it settled at once (nothing left to run). */
  jobState: JobState | null;
}

/**
 * Runs a finished job again as a new job (trigger 'rerun', rerun_of set, same
 * sha, ref and trust) from the tasks the first job compiled. With failedOnly,
 * successful tasks keep their outcome and outputs and the rest run again, with
 * every task after a failed or cancelled one (runAgain); a job where nothing
 * failed gives a new job of kept tasks, finished at once. A rerun never
 * cancels anything as superseded.
 */
export async function rerunJob(
  pool: Pool,
  jobId: string,
  failedOnly: boolean,
): Promise<RerunResult> {
  const created = await transaction(
    pool,
    async (tx) => {
      const old = await getJob(tx, jobId);
      if (!old) throw new NotFoundError(`job ${jobId} does not exist`);
      if (!(FINISHED_JOB_STATES as readonly JobState[]).includes(old.state)) {
        throw new ConflictError(
          `job #${old.number} is ${old.state}; only a finished job can be rerun`,
        );
      }
      const { job } = await createJobTx(tx, {
        projectId: old.project_id,
        ref: old.ref,
        sha: old.sha,
        trigger: 'rerun',
        // An untrusted job's rerun is untrusted. It is not held for approval:
        // only an admin can ask for a rerun, and asking is the approval.
        trusted: old.trusted,
        trustReason: `a rerun of job #${old.number}${old.trust_reason ? `: ${old.trust_reason}` : ''}`,
        pullRequest: old.pull_request,
        baseRef: old.base_ref,
        rerunOf: old.id,
        // What the first run was given and which schedule made it: a rerun
        // that compiles afresh (the first never compiled) compiles with them.
        inputs: old.inputs,
        scheduleName: old.schedule_name,
      });
      // A job that never compiled (its pipeline was broken or unreadable) has no
      // tasks to copy: compile the new one, which also picks up a forge that is
      // reachable again.
      if (old.started_at === null) return { job, dispatch: true };

      const { rows } = await tx.query<TaskRow>(
        'select * from tasks where job_id = $1 order by position',
        [old.id],
      );
      const again = failedOnly ? runAgain(rows) : null;
      const specs: TaskSpec[] = rows.map((t) => ({
        name: t.name,
        baseName: t.base_name,
        matrix: t.matrix,
        image: t.image,
        script: t.script,
        env: t.env,
        labels: t.labels,
        needs: t.needs,
        secrets: t.secrets,
        outputs: t.outputs,
        allowFailure: t.allow_failure,
        when: t.run_when,
        maxAttempts: t.max_attempts,
        timeoutS: t.timeout_s,
        queueTimeoutS: t.queue_timeout_s,
        failFast: t.fail_fast,
        services: t.services,
        storage: t.storage,
        block: t.block,
        concurrency:
          t.concurrency_group && t.concurrency_limit && t.concurrency_mode
            ? { group: t.concurrency_group, limit: t.concurrency_limit, mode: t.concurrency_mode }
            : null,
        // The first job's changes: decision stands: the files of the commit did not change.
        pathSkipped: t.path_skipped ? (t.error ?? 'no changed file matches') : undefined,
        position: t.position,
        kept:
          again && t.state === 'success' && !again.has(t.name)
            ? {
                from: t.copied_from ?? t.id,
                attempt: t.attempt,
                exitCode: t.exit_code,
                startedAt: t.started_at,
                finishedAt: t.finished_at,
              }
            : undefined,
      }));
      await insertTasksTx(tx, job, specs);
      // What the first job's changes: decision was made from, shown on the
      // new one's page, and the pipeline's own concurrency group, which the
      // rerun joins as the first job did.
      await tx.query(
        `update jobs n set diff_base = o.diff_base, diff_files = o.diff_files,
                           diff_count = o.diff_count, diff_note = o.diff_note,
                           concurrency_group = o.concurrency_group,
                           concurrency_key = o.concurrency_key,
                           concurrency_limit = o.concurrency_limit,
                           concurrency_mode = o.concurrency_mode
           from jobs o where n.id = $1 and o.id = $2`,
        [job.id, old.id],
      );
      const started = await tx.query<JobRow>(
        `update jobs set state = 'running', started_at = now(), pipeline_name = $2
        where id = $1 returning *`,
        [job.id, old.pipeline_name],
      );
      const n = specs.length;
      await enqueueStatus(
        tx,
        job.id,
        'pending',
        `running ${n} task${n === 1 ? '' : 's'} (a rerun)`,
      );
      await noteBlockedTx(tx, job.id);
      return { job: started.rows[0]!, dispatch: false };
    },
    // REPEATABLE READ with immediate retries, as every job creation
    // (createJobTx). Only the first job's successful tasks are kept, and a
    // finished task no longer changes.
    { isolation: 'repeatable read', immediate: true, maxRetries: 64, statementTimeoutMs: 30_000 },
  );
  if (created.dispatch) return { ...created, jobState: null };
  const follow = await followUpAfterCommit(pool, created.job.id);
  return { ...created, jobState: follow?.jobState ?? null };
}

/**
 * The successful tasks a failed-only rerun runs again all the same: those
 * that come after a failed or cancelled task through their needs, at any
 * depth. They ran because of that outcome (`when: always`, `on_failure`, or
 * after an allow_failure task), and run again with its new one.
 */
export function runAgain(tasks: readonly Pick<TaskRow, 'name' | 'state' | 'needs'>[]): Set<string> {
  const dependents = new Map<string, string[]>();
  for (const t of tasks) {
    for (const need of t.needs) dependents.set(need, [...(dependents.get(need) ?? []), t.name]);
  }
  const again = new Set<string>();
  const todo = tasks
    .filter((t) => t.state === 'failed' || t.state === 'cancelled')
    .map((t) => t.name);
  for (let name = todo.pop(); name !== undefined; name = todo.pop()) {
    for (const next of dependents.get(name) ?? []) {
      if (again.has(next)) continue;
      again.add(next);
      todo.push(next);
    }
  }
  return again;
}
