// Builders for scheduler tests: a project, workers, and jobs started from task
// specs written the way the pipeline compiler would produce them.

import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import type { Pool } from '../../lib/db/index.ts';
import { type ClaimedTask, claimTask, createJob, startJob } from '../../lib/scheduler/index.ts';
import type { JobRow, TaskRow, TaskSpec } from '../../lib/scheduler/types.ts';

let projects = 0;

/** Inserts a project and answers its id. */
export async function makeProject(
  pool: Pool,
  opts: { cancelSuperseded?: boolean; secrets?: string[] } = {},
): Promise<string> {
  const id = `p${++projects}-${randomBytes(3).toString('hex')}`;
  await pool.query(
    `insert into projects (id, name, forge, repo, repo_url, webhook_secret_enc, cancel_superseded)
     values ($1, $1, 'github', $2, 'https://forge.test/' || $2, 'sealed', $3)`,
    [id, `acme/${id}`, opts.cancelSuperseded ?? true],
  );
  for (const name of opts.secrets ?? []) {
    await pool.query(
      `insert into project_secrets (project_id, name, value_enc) values ($1, $2, 'sealed')`,
      [id, name],
    );
  }
  return id;
}

/** Inserts a worker and answers its id. */
export async function makeWorker(pool: Pool, labels: string[] = []): Promise<string> {
  const { rows } = await pool.query<{ id: string }>(
    `insert into workers (name, token_hash, labels) values ($1, $2, $3) returning id`,
    [`w-${randomBytes(3).toString('hex')}`, randomBytes(32), labels],
  );
  return rows[0]!.id;
}

/** A task spec with the compiler's defaults. */
export function spec(name: string, over: Partial<TaskSpec> = {}): TaskSpec {
  return {
    name,
    baseName: name,
    matrix: {},
    image: null,
    script: ['true'],
    env: {},
    labels: [],
    needs: [],
    secrets: [],
    outputs: [],
    allowFailure: false,
    maxAttempts: 3,
    timeoutS: 3600,
    queueTimeoutS: 86_400,
    position: 0,
    ...over,
  };
}

export const sha = (n = 0) => n.toString(16).padStart(40, 'a');

/** Creates and starts a job on `ref` with these tasks (positions follow the array). */
export async function startedJob(
  pool: Pool,
  projectId: string,
  tasks: TaskSpec[],
  opts: { ref?: string; trusted?: boolean } = {},
): Promise<JobRow> {
  const { job } = await createJob(pool, {
    projectId,
    ref: opts.ref ?? `refs/heads/b-${randomBytes(3).toString('hex')}`,
    sha: sha(),
    trigger: 'push',
    trusted: opts.trusted ?? true,
  });
  await startJob(pool, job.id, { name: null, tasks: tasks.map((t, i) => ({ ...t, position: i })) });
  return job;
}

/** The job's tasks by name. */
export async function tasksOf(pool: Pool, jobId: string): Promise<Record<string, TaskRow>> {
  const { rows } = await pool.query<TaskRow>('select * from tasks where job_id = $1', [jobId]);
  return Object.fromEntries(rows.map((r) => [r.name, r]));
}

export async function jobState(pool: Pool, jobId: string): Promise<string> {
  const { rows } = await pool.query('select state from jobs where id = $1', [jobId]);
  return rows[0].state;
}

/** A promise that resolves once `n` callers have reached it: starts racers together. */
export function barrier(n: number): () => Promise<void> {
  let waiting = 0;
  let release: () => void = () => {};
  const all = new Promise<void>((r) => {
    release = r;
  });
  return () => {
    waiting++;
    if (waiting >= n) release();
    return all;
  };
}

/** Claims a task for `worker` and asserts it is the one named (claims take the oldest job first). */
export async function claimNamed(
  pool: Pool,
  worker: string,
  name: string,
  opts: { labels?: string[]; leaseS?: number } = {},
): Promise<ClaimedTask> {
  const task = await claimTask(pool, worker, opts.labels ?? [], { leaseS: opts.leaseS });
  assert.ok(task, `a task is claimable (wanted ${name})`);
  assert.equal(task.name, name);
  return task;
}
