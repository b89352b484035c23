// What a runner receives when it claims a task: the task, its job's commit,
// the outputs of the tasks it needs, and (for trusted jobs only) its secrets
// and the clone token.
import type { AuthenticatedWorker } from './auth.ts';
import type { Pool } from './db/index.ts';
import { ValidationError } from './errors.ts';
import { forgeToken, getProjectRow, secretValues } from './projects.ts';
import { type ClaimedTask, claimTask } from './scheduler/index.ts';
import type { Keyring } from './secrets.ts';
import { touchWorker } from './workers.ts';

export interface Assignment {
  id: string;
  job_id: string;
  name: string;
  lease_id: string;
  attempt: number;
  max_attempts: number;
  lease_expires_at: Date;
  image: string | null;
  script: string[];
  env: Record<string, string>;
  secrets: Record<string, string>;
  matrix: Record<string, string>;
  needs_outputs: Record<string, Record<string, string>>;
  timeout_s: number;
  repo: { url: string; sha: string; ref: string; token?: string };
}

/**
 * Claims a task for a worker and assembles what the runner needs. `labels`
 * narrows the worker's registered labels; a label it was not registered with
 * is a 400. Answers null when nothing is claimable.
 */
export async function claimForWorker(
  pool: Pool,
  keyring: Keyring,
  worker: AuthenticatedWorker,
  labels: string[] | undefined,
  leaseS: number,
): Promise<Assignment | null> {
  if (labels) {
    const unknown = labels
      .map((label, i) => ({ label, i }))
      .filter(({ label }) => !worker.labels.includes(label));
    if (unknown.length > 0) {
      throw new ValidationError(
        unknown.map(({ label, i }) => ({
          path: `labels.${i}`,
          message: `label "${label}" is not registered for this worker`,
        })),
      );
    }
  }
  await touchWorker(pool, worker.id);
  const task = await claimTask(pool, worker.id, labels ?? worker.labels, { leaseS });
  if (!task) return null;
  return assemble(pool, keyring, task);
}

async function assemble(pool: Pool, keyring: Keyring, task: ClaimedTask): Promise<Assignment> {
  // Read after the claim committed: the lease makes the task ours, and the
  // outputs of finished tasks no longer change.
  const project = await getProjectRow(pool, task.project_id);
  const outputs = await pool.query<{ task: string; name: string; value: string }>(
    `select p.name as task, o.name, o.value
       from task_needs n join tasks p on p.id = n.need_id join task_outputs o on o.task_id = p.id
      where n.task_id = $1
      order by p.position, o.name`,
    [task.id],
  );
  const needsOutputs: Record<string, Record<string, string>> = {};
  for (const row of outputs.rows) {
    needsOutputs[row.task] ??= {};
    needsOutputs[row.task]![row.name] = row.value;
  }
  // Untrusted jobs (pull requests from forks) run, but with no secret values
  // and no token: their code is not the project's own.
  const secrets = task.trusted
    ? await secretValues(pool, keyring, task.project_id, task.secrets)
    : {};
  const token = task.trusted && project ? forgeToken(keyring, project) : null;
  return {
    id: task.id,
    job_id: task.job_id,
    name: task.name,
    lease_id: task.lease_id!,
    attempt: task.attempt,
    max_attempts: task.max_attempts,
    lease_expires_at: task.lease_expires_at!,
    image: task.image,
    script: task.script,
    env: task.env,
    secrets,
    matrix: task.matrix,
    needs_outputs: needsOutputs,
    timeout_s: task.timeout_s,
    repo: {
      url: project?.repo_url ?? '',
      sha: task.sha,
      ref: task.ref,
      ...(token ? { token } : {}),
    },
  };
}
