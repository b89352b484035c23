// A scheduler test file's database with the fixtures of ./fixtures.ts bound to
// its pool, and the few steps nearly every scheduler test takes: a project with
// a worker and a started job, a pending job, a completion under the lease the
// claim gave.
import {
  type CompletionResult,
  type CreatedJob,
  completeTask,
  createJob,
  type NewJob,
} from '../../lib/scheduler/index.ts';
import type { JobRow } from '../../lib/scheduler/types.ts';
import { type TestDatabase, testDatabase } from './db.ts';
import {
  claimNamed,
  jobState,
  makeProject,
  makeWorker,
  sha,
  startedJob,
  tasksOf,
} from './fixtures.ts';

type Bound<F> = F extends (pool: never, ...args: infer A) => infer R ? (...args: A) => R : never;

/** The task a completion is for: a claim, or an id and lease made up to test the checks. */
export interface LeasedTask {
  id: string;
  lease_id: string | null;
}

/** What a completion may add to its outcome. */
export type CompletionExtras = Partial<
  Pick<Parameters<typeof completeTask>[1], 'exitCode' | 'outputs' | 'transient' | 'error'>
>;

/** A started job with the project it belongs to and a worker to claim its tasks. */
export interface RunningJob {
  project: string;
  worker: string;
  job: JobRow;
}

export interface SchedulerDatabase extends TestDatabase {
  /** `makeProject` on this database. */
  makeProject: Bound<typeof makeProject>;
  /** `makeWorker` on this database. */
  makeWorker: Bound<typeof makeWorker>;
  /** `startedJob` on this database. */
  startedJob: Bound<typeof startedJob>;
  /** `tasksOf` on this database. */
  tasksOf: Bound<typeof tasksOf>;
  /** `jobState` on this database. */
  jobState: Bound<typeof jobState>;
  /** `claimNamed` on this database. */
  claimNamed: Bound<typeof claimNamed>;
  /**
   * A new project, then a worker without labels, then a job of that project
   * started with `tasks` (as `startedJob`, which `opts` goes to).
   */
  runningJob(
    tasks: Parameters<typeof startedJob>[2],
    opts?: Parameters<typeof startedJob>[3],
  ): Promise<RunningJob>;
  /**
   * Creates a job of `projectId` and leaves it pending: a trusted push of
   * `sha()` to refs/heads/main unless `over` says otherwise.
   */
  pendingJob(projectId: string, over?: Partial<NewJob>): Promise<CreatedJob>;
  /** Completes `task` for `worker` with `outcome` under the lease the task carries. */
  finish(
    worker: string,
    task: LeasedTask,
    outcome: 'success' | 'failed' | 'cancelled',
    more?: CompletionExtras,
  ): Promise<CompletionResult>;
}

/**
 * `testDatabase` for a scheduler test file, with the fixtures bound to its
 * pool. Await it at the top level of the file, as `testDatabase`.
 */
export async function schedulerDatabase(file: string): Promise<SchedulerDatabase> {
  const db = await testDatabase(file);
  const { pool } = db;
  return {
    ...db,
    makeProject: (...args) => makeProject(pool, ...args),
    makeWorker: (...args) => makeWorker(pool, ...args),
    startedJob: (...args) => startedJob(pool, ...args),
    tasksOf: (...args) => tasksOf(pool, ...args),
    jobState: (...args) => jobState(pool, ...args),
    claimNamed: (...args) => claimNamed(pool, ...args),
    async runningJob(tasks, opts) {
      const project = await makeProject(pool);
      const worker = await makeWorker(pool);
      const job = await startedJob(pool, project, tasks, opts);
      return { project, worker, job };
    },
    pendingJob: (projectId, over = {}) =>
      createJob(pool, {
        projectId,
        ref: 'refs/heads/main',
        sha: sha(),
        trigger: 'push',
        trusted: true,
        ...over,
      }),
    finish: (worker, task, outcome, more = {}) =>
      completeTask(pool, {
        workerId: worker,
        taskId: task.id,
        leaseId: task.lease_id!,
        outcome,
        ...more,
      }),
  };
}
