// What a runner receives when it claims a task: the task, its job's commit,
// the outputs of the tasks it needs, and (for trusted jobs only) its secrets
// and the clone token.
import type { AuthenticatedWorker } from './auth.ts';
import type { Pool } from './db/index.ts';
import { ValidationError } from './errors.ts';
import { forgeToken, secretValues } from './projects.ts';
import { type ClaimedTask, claimTask } from './scheduler/index.ts';
import type { Keyring } from './secrets.ts';

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
  const task = await claimTask(pool, worker.id, labels ?? worker.labels, { leaseS });
  if (!task) return null;
  return assemble(pool, keyring, task);
}

async function assemble(pool: Pool, keyring: Keyring, task: ClaimedTask): Promise<Assignment> {
  // The claim answered the project and the outputs of the needed tasks with
  // the task; only secret values need another read, and only when the job is
  // trusted (not a pull request from a fork) and the task names some.
  const secrets = task.trusted
    ? await secretValues(pool, keyring, task.project_id, task.secrets)
    : {};
  const token = task.trusted
    ? forgeToken(keyring, { id: task.project_id, forge_token_enc: task.forge_token_enc })
    : null;
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
    needs_outputs: task.needs_outputs,
    timeout_s: task.timeout_s,
    repo: {
      url: task.repo_url,
      sha: task.sha,
      ref: task.ref,
      ...(token ? { token } : {}),
    },
  };
}
