// What the admin API reads: the scheduler's views of jobs, tasks and logs
// (lib/scheduler/views.ts, task-log.ts), with the project checked first where
// the route names one.
import type { Queryable } from '../db/index.ts';
import { type JobView, listJobs } from '../scheduler/views.ts';
import { getProject } from './projects.ts';

export { MAX_LOG_PAGE_BYTES, readLog } from '../scheduler/task-log.ts';
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
