// What a runner receives when it claims a task: the task, its job's commit,
// the outputs of the tasks it needs, and (for trusted jobs only) its secrets
// and the clone token.

import { randomUUID } from 'node:crypto';
import type { AppContext } from '../context.ts';
import { type Pool, prepared, statement, TransactionConflictError } from '../db/index.ts';
import { UnauthorizedError, UnavailableError, ValidationError } from '../errors.ts';
import { workerTokenRequired } from '../http/auth.ts';
import { lookUpToken } from '../idle/workers.ts';
import { log } from '../log.ts';
import { CLAIMED_COLUMNS, type ClaimedTask, releaseClaim } from '../scheduler/index.ts';
import { followUpAfterCommit } from '../scheduler/progress.ts';
import { WORKER_BY_TOKEN } from '../scheduler/worker-token.ts';
import { type Keyring, SecretDecryptError } from '../secrets.ts';
import { claimWithin, tasksClaimable } from './pickup.ts';
import { forgeToken, secretValues } from './projects.ts';

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
  /** Whether the job is trusted: secrets and the repository token come only then. */
  trusted: boolean;
  /**
   * Containers to start beside the script on the docker executor, each reached
   * by its `name` on the task's network; [] for none. Never given secrets.
   */
  services: Array<{
    name: string;
    image: string;
    env: Record<string, string>;
    ports: number[];
    health: string | null;
    health_timeout_s: number;
    /** Replaces the image's CMD; null keeps it. */
    command: string[] | null;
    /** Replaces the image's ENTRYPOINT; null keeps it, [] clears it. */
    entrypoint: string[] | null;
  }>;
  /** What to upload after the script (docs/artifacts.md); null for nothing. */
  artifacts: { paths: string[]; when: 'on_success' | 'on_failure' | 'always' } | null;
  /** Caches to restore before the script and save after it; [] for none. */
  caches: Array<{
    key: string;
    restore_keys: string[];
    paths: string[];
    policy: 'pull' | 'push' | 'pull-push';
  }>;
  /** Test reports to upload after the script, whatever its outcome; null for none. */
  reports: { junit: string[] } | null;
  repo: { url: string; sha: string; ref: string; token?: string };
}

/** How a runner's claim is made, beyond its token and labels. */
export interface ClaimRequest {
  /** The runner's Idempotency-Key: a repeat while the lease lives answers the same attempt. */
  key?: string | null;
  /**
   * Aborted when the request ran out of time and was answered 503 (middy's
   * early timeout): a claim that commits after that never reaches its
   * runner, and is given back.
   */
  signal?: AbortSignal;
  /**
   * A long poll: while nothing is claimable, wait up to this many seconds
   * (at most 25) for a wake-up and claim again (lib/app/pickup.ts). Only
   * where a pickup channel is configured; elsewhere the claim answers at once.
   */
  waitS?: number;
}

function unknownLabels(labels: string[] | undefined, registered: string[]): ValidationError | null {
  const unknown = (labels ?? [])
    .map((label, i) => ({ label, i }))
    .filter(({ label }) => !registered.includes(label));
  if (unknown.length === 0) return null;
  return new ValidationError(
    unknown.map(({ label, i }) => ({
      path: `labels.${i}`,
      message: `label "${label}" is not registered for this worker`,
    })),
  );
}

// The runner route's claim: the token check, the "seen" mark and the claim in
// one round trip. The claim runs only when the labels asked for are among the
// worker's (a lateral row that exists only then comes first); otherwise the
// statement answers the worker's labels and claims nothing. An ephemeral
// worker's claimed_lease, as the token check read it, tells its one claim
// made (401 after it) from nothing to claim (204).
const CLAIM_BY_TOKEN = `
  with ${WORKER_BY_TOKEN}
  select w.id as auth_worker_id, w.labels as auth_worker_labels,
         w.ephemeral as auth_ephemeral, w.claimed_lease as auth_claimed_lease, x.*
    from worker w
    left join lateral (
      select ${CLAIMED_COLUMNS}
        from (select coalesce($2::text[], w.labels) as labels
               where $2::text[] is null or $2::text[] <@ w.labels) g
       cross join lateral conductor_claim(w.id, g.labels, $3, $4, $5) c
    ) x on true`;

interface ClaimByTokenRow extends Partial<ClaimedTask> {
  auth_worker_id: string;
  auth_worker_labels: string[];
  auth_ephemeral: boolean;
  auth_claimed_lease: string | null;
}

/** What the claim route answers: the task, and whether the worker is ephemeral (null: not known). */
export interface ClaimAnswer {
  task: Assignment | null;
  ephemeral: boolean | null;
}

/**
 * Claims a task for the worker whose bearer token hashes to `tokenHash` and
 * assembles what the runner needs, in one statement: a 401 for an unknown or
 * revoked token, and for an ephemeral worker that has made its one claim;
 * `labels` narrows the worker's registered labels, and a label it was not
 * registered with is a 400; task null when nothing is claimable. The lease id
 * is chosen here, before the statement is sent: when the statement fails
 * after it may have committed (a connection lost or gone silent, a timeout),
 * the lease is given back, so the lost reply leaves no lease nobody holds.
 */
export async function claimForToken(
  pool: Pool,
  keyring: Keyring,
  tokenHash: Buffer,
  labels: string[] | undefined,
  leaseS: number,
  request: ClaimRequest = {},
): Promise<ClaimAnswer> {
  const leaseId = randomUUID();
  let rows: ClaimByTokenRow[];
  try {
    rows = await statement<ClaimByTokenRow>(
      pool,
      prepared('conductor_claim_by_token', CLAIM_BY_TOKEN, [
        tokenHash,
        labels ?? null,
        leaseS,
        leaseId,
        request.key ?? null,
      ]),
      { maxRetries: 10 },
    );
  } catch (err) {
    // As claimTask: a claim that keeps losing serialization races or
    // deadlocks answers "nothing claimable" and the runner polls again. It
    // rolled back: there is nothing to give back.
    if (err instanceof TransactionConflictError) return { task: null, ephemeral: null };
    await giveBack(pool, leaseId, 'its reply was lost');
    throw err;
  }
  const row = rows[0];
  if (!row) throw workerTokenRequired();
  const bad = unknownLabels(labels, row.auth_worker_labels);
  if (bad) throw bad;
  const ephemeral = row.auth_ephemeral;
  if (!row.id) {
    if (ephemeral && row.auth_claimed_lease) {
      throw new UnauthorizedError(
        'this ephemeral worker has made its one claim: its token is good for that task only',
      );
    }
    return { task: null, ephemeral };
  }
  const {
    auth_worker_id: _id,
    auth_worker_labels: _labels,
    auth_ephemeral: _ephemeral,
    auth_claimed_lease: _claimed,
    ...task
  } = row;
  const assignment = await assembleOrGiveBack(pool, keyring, task as ClaimedTask);
  if (assignment && request.signal?.aborted) {
    // The request was answered 503 while this ran: the runner never gets
    // this answer. It may still claim again with the same key, and be
    // answered the same attempt, until the lease is given back here.
    await giveBack(pool, assignment.lease_id, 'the request ran out of time');
    throw new UnavailableError('the request ran out of time; try again');
  }
  return { task: assignment, ephemeral };
}

/** releaseClaim for a claim whose answer never left; a failure only logs (the lease then expires). */
async function giveBack(pool: Pool, leaseId: string, why: string): Promise<void> {
  try {
    const released = await releaseClaim(pool, leaseId, null);
    if (released) {
      log('warn', `a claim was given back: ${why}`, { lease_id: leaseId });
      if (released.ended) await followUpAfterCommit(pool, released.jobId, released.taskId);
    }
  } catch (releaseErr) {
    // The lease then expires as a lost runner's would; a repeat of the
    // claim with the same key is answered it meanwhile.
    log('warn', 'could not give back a claim whose reply was lost', {
      lease_id: leaseId,
      releaseErr,
    });
  }
}

/**
 * What a closed idle gate answers a claim without the database, from the
 * worker tokens in its bucket (lib/idle/workers.ts): an unknown or revoked
 * token 401, a label the worker was not registered with 400, a known token
 * 204 (no job can proceed, so nothing is claimable). Answers undefined when
 * the database must answer: the gate is open, the bucket cannot say, or the
 * worker is ephemeral (its one claim is the database's to count).
 */
export async function answerFromClosedGate(
  ctx: AppContext,
  tokenHash: Buffer,
  labels: string[] | undefined,
): Promise<null | undefined> {
  if (!ctx.gate || (await ctx.gate.mayHaveWork())) return undefined;
  const found = await lookUpToken(ctx.gate, tokenHash);
  if (found.kind === 'refused') throw workerTokenRequired();
  if (found.kind === 'ask' || found.entry.ephemeral) return undefined;
  const bad = unknownLabels(labels, found.entry.labels);
  if (bad) throw bad;
  return null;
}

/**
 * The runner's claim: claimForToken under the configured lease, unless the
 * idle gate is closed and answers it from its bucket (answerFromClosedGate),
 * so the database (perhaps paused) is not woken to say "nothing to claim".
 */
export async function claimForRunner(
  ctx: AppContext,
  tokenHash: Buffer,
  labels: string[] | undefined,
  request: ClaimRequest = {},
): Promise<Assignment | null> {
  return claimWithin(ctx, request.waitS ?? 0, request.signal, async () => {
    // A closed gate answers without the database while it waits too.
    if ((await answerFromClosedGate(ctx, tokenHash, labels)) === null) return null;
    try {
      const answer = await claimForToken(
        ctx.pool,
        ctx.keyring,
        tokenHash,
        labels,
        ctx.config.CONDUCTOR_LEASE_S,
        request,
      );
      return answer.task;
    } catch (err) {
      // A claim given back (its reply lost, its answer not assembled) is
      // queued again: other waiting runners may take it.
      await tasksClaimable(ctx, 'give-back');
      throw err;
    }
  });
}

/** A claimed task's sealed value (a secret, the forge token) that cannot be opened. */
class UnopenableError extends Error {}

/**
 * Assembles the answer of a claim that has committed. If that fails, the
 * claim never reaches its runner, so it is given back under its lease: a
 * value sealed under a key the keyring lacks will not open on a retry, and
 * fails the task naming it (the runner is answered "nothing claimable" and
 * polls on); anything else (a read that failed) puts the task back in the
 * queue without counting the attempt, and the error answers the request.
 */
async function assembleOrGiveBack(
  pool: Pool,
  keyring: Keyring,
  task: ClaimedTask,
): Promise<Assignment | null> {
  try {
    return await assemble(pool, keyring, task);
  } catch (err) {
    const failure = err instanceof UnopenableError ? err.message : null;
    try {
      const released = await releaseClaim(pool, task.lease_id!, failure);
      if (released?.ended) {
        if (released.failed) {
          log('error', 'a claimed task failed: a sealed value cannot be opened', {
            task_id: task.id,
            err,
          });
        }
        await followUpAfterCommit(pool, released.jobId, task.id);
        if (released.failed) return null;
      }
    } catch (releaseErr) {
      // The lease then expires as a lost runner's would, and the sweep
      // queues the task again.
      log('error', 'could not give back a claim that failed', { task_id: task.id, releaseErr });
    }
    throw err;
  }
}

function opened<T>(what: string, open: () => T): T {
  try {
    return open();
  } catch (err) {
    if (err instanceof SecretDecryptError) {
      throw new UnopenableError(`${what} cannot be opened with the configured keys`, {
        cause: err,
      });
    }
    throw err;
  }
}

async function assemble(pool: Pool, keyring: Keyring, task: ClaimedTask): Promise<Assignment> {
  // The claim answered the project and the outputs of the needed tasks with
  // the task; only secret values need another read, and only when the job is
  // trusted (not a pull request from a fork) and the task names some.
  const secrets = task.trusted
    ? await secretValues(pool, keyring, task.project_id, task.secrets, (name, open) =>
        opened(`secret ${name}`, open),
      )
    : {};
  const token = task.trusted
    ? opened("the project's forge token", () =>
        forgeToken(keyring, { id: task.project_id, forge_token_enc: task.forge_token_enc }),
      )
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
    trusted: task.trusted,
    services: (task.services ?? []).map((s) => ({
      name: s.name,
      image: s.image,
      env: s.env,
      ports: s.ports,
      health: s.health,
      health_timeout_s: s.healthTimeoutS,
      command: s.command ?? null,
      entrypoint: s.entrypoint ?? null,
    })),
    artifacts: task.storage?.artifacts
      ? { paths: task.storage.artifacts.paths, when: task.storage.artifacts.when }
      : null,
    caches: (task.storage?.caches ?? []).map((c) => ({
      key: c.key,
      restore_keys: c.restoreKeys,
      paths: c.paths,
      policy: c.policy,
    })),
    reports: task.storage?.reports ? { junit: [...task.storage.reports.junit] } : null,
    repo: {
      url: task.repo_url,
      sha: task.sha,
      ref: task.ref,
      ...(token ? { token } : {}),
    },
  };
}
