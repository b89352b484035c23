// What the admin API reads: the scheduler's views of jobs, tasks and logs
// (lib/scheduler/views.ts, task-log.ts), with the project checked first where
// the route names one.
import type { Queryable } from '../db/index.ts';
import { NotFoundError } from '../errors.ts';
import { signJobLink } from '../pages/access.ts';
import { type LogPage, readLog } from '../scheduler/task-log.ts';
import { getJobView, type JobView, listJobs, type TaskView } from '../scheduler/views.ts';
import type { Keyring } from '../secrets.ts';
import { getProject } from './projects.ts';

export { stampPage as stampedLog } from '../scheduler/log-times.ts';
export { MAX_LOG_PAGE_BYTES } from '../scheduler/task-log.ts';
export { getJobOnly, getJobView, type JobView, type TaskView } from '../scheduler/views.ts';

/** A project's jobs as listJobs answers them; a 404 for a project that does not exist. */
export async function listProjectJobs(
  db: Queryable,
  projectId: string,
  limit: number,
  before?: number,
): Promise<JobView[]> {
  await getProject(db, projectId);
  return listJobs(db, projectId, limit, before);
}

/**
 * A job and its tasks, the job with `page_url`: its page by the signed link a
 * commit status carries (lib/pages/access.ts), which opens without signing
 * in, so `ctl job` can print it. `origin` is where the pages are served.
 */
export async function getJobWithPage(
  db: Queryable,
  keyring: Keyring,
  jobId: string,
  origin: string,
): Promise<{ job: JobView & { page_url: string }; tasks: TaskView[] }> {
  const { job, tasks } = await getJobView(db, jobId);
  const page_url = `${origin.replace(/\/+$/, '')}/jobs/${job.id}?sig=${signJobLink(keyring, job.id)}`;
  return { job: { ...job, page_url }, tasks };
}

/**
 * A page of a task's log (lib/scheduler/task-log.ts readLog). A task kept by a
 * failed-only rerun never ran in its own job: its log is the one of the task
 * it was copied from (as on the job page), and `copiedFrom` names that task.
 */
export async function readTaskLog(
  db: Queryable,
  taskId: string,
  attempt?: number,
  offset?: number,
  limit?: number,
): Promise<LogPage & { copiedFrom: string | null }> {
  const { rows } = await db.query<{
    copied_from: string | null;
    attempt: number;
    attempts: number;
  }>(
    `select t.copied_from, t.attempt,
            (select count(*)::int from task_attempts a where a.task_id = t.id) as attempts
       from tasks t where t.id = $1`,
    [taskId],
  );
  const task = rows[0];
  if (!task) throw new NotFoundError(`task ${taskId} does not exist`);
  if (task.copied_from !== null) {
    return {
      ...(await readLog(db, task.copied_from, attempt, offset, limit)),
      copiedFrom: task.copied_from,
    };
  }
  // Kept by a rerun (it has an attempt number but never ran here) from a job
  // deleted since: the log went with that job.
  if (task.attempt > 0 && task.attempts === 0) {
    throw new NotFoundError(
      `task ${taskId} was kept by a failed-only rerun from an earlier job that has since been deleted; its log was deleted with that job`,
    );
  }
  return { ...(await readLog(db, taskId, attempt, offset, limit)), copiedFrom: null };
}
