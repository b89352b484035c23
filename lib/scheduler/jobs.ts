import {
  type Pool,
  type Queryable,
  SQLSTATE,
  sqlState,
  statement,
  transaction,
} from '../db/index.ts';
import { NotFoundError } from '../errors.ts';
import type { CompiledConcurrency } from '../pipeline/index.ts';
import { type JobState, type JobTrigger, UNFINISHED_JOB_STATES } from '../states.ts';
import { cancelJobsTx, LOCK_WAITING } from './cancel.ts';
import { applyJobGroupMode, joinGroupsTx, joinJobGroupTx } from './concurrency.ts';
import { enqueueStatus, WAITING_FOR_APPROVAL } from './outbox.ts';
import { followUpAfterCommit, noteBlockedTx, skipReachable } from './progress.ts';
import type { JobErrorEntry, JobRow, TaskSpec } from './types.ts';

export interface NewJob {
  projectId: string;
  ref: string;
  sha: string;
  trigger: JobTrigger;
  trusted: boolean;
  pullRequest?: number | null;
  /** The branch a pull request merges into. */
  baseRef?: string | null;
  /** The forge's delivery id: a delivery seen before answers its job. */
  deliveryId?: string | null;
  /** SHA-256 of the raw webhook body: a body accepted before, under any delivery id, answers its job. */
  bodySha256?: Buffer | null;
  /** Created `blocked`, waiting for approval before its compile (an untrusted job of an 'approve' project). */
  blocked?: boolean;
  /** Logins the compile must confirm as writers before the job is trusted (it is created untrusted). */
  confirmWriters?: string[] | null;
  /** Why the job is trusted or not, in words. */
  trustReason?: string | null;
  rerunOf?: string | null;
  /** What a manual or scheduled run was given for the pipeline's `inputs:` (checked when it compiles). */
  inputs?: Record<string, unknown> | null;
  /** The schedule that fired the job. */
  scheduleName?: string | null;
  /**
   * When the API received the delivery (a queued one carries it): superseding
   * goes by it, so a delivery handled late neither cancels a newer one nor
   * outlives it. Unset: now.
   */
  receivedAt?: Date | null;
  /** A branch push's diff as its payload says (lib/forge/webhook.ts readPushDiff), for `changes:`. */
  push?: { before: string | null; forced: boolean; created: boolean; files: string[] | null };
}

export interface CreatedJob {
  job: JobRow;
  /** True when the delivery id, or the raw body under another id (a replay), was seen before and `job` is the job it created. */
  duplicate: boolean;
  /** Older unfinished jobs of the same ref that this one cancelled. */
  superseded: string[];
}

async function jobByDelivery(db: Queryable, projectId: string, deliveryId: string) {
  const { rows } = await db.query<JobRow>(
    'select * from jobs where project_id = $1 and delivery_id = $2',
    [projectId, deliveryId],
  );
  return rows[0];
}

// Keyed by the unique index jobs_project_body (migrations/003): never a scan.
async function jobByBody(db: Queryable, projectId: string, bodySha256: Buffer) {
  const { rows } = await db.query<JobRow>(
    'select * from jobs where project_id = $1 and body_sha256 = $2',
    [projectId, bodySha256],
  );
  return rows[0];
}

/** The job a delivery id or a raw body created before, if either was seen. */
async function seenBefore(db: Queryable, input: NewJob): Promise<JobRow | undefined> {
  if (input.deliveryId) {
    const existing = await jobByDelivery(db, input.projectId, input.deliveryId);
    if (existing) return existing;
  }
  if (input.bodySha256) return jobByBody(db, input.projectId, input.bodySha256);
  return undefined;
}

// Only a push (to a branch or a pull request) supersedes: a manual run, a
// schedule's, a rerun or a tag never cancels anything, so a `conductor
// trigger` does not cancel a deploy of its branch waiting at a block step,
// nor a nightly build the pushes of its branch.
function supersedes(job: NewJob): boolean {
  return (
    (job.trigger === 'push' || job.trigger === 'pull_request') && !job.ref.startsWith('refs/tags/')
  );
}

/**
 * Inserts a pending (or blocked) job with the project's next number, inside
 * the caller's transaction. At REPEATABLE READ (createJob, rerunJob) the
 * project row lock serialises creations of one project: a creation that
 * waited for another's commit fails with 40001 when the lock is granted, and
 * its retry reads the new counter and any job with its delivery id or body. `supersedes` tells the caller
 * to cancel the older unfinished jobs of the ref once this has committed.
 */
export async function createJobTx(
  tx: Queryable,
  input: NewJob,
): Promise<{ job: JobRow; duplicate: boolean; supersedes: boolean }> {
  // Wait for any creation of this project in flight.
  const project = await tx.query<{ cancel_superseded: boolean }>(
    // NO KEY UPDATE is enough to queue creations, and does not block the
    // foreign-key checks of rows that reference the project.
    'select cancel_superseded from projects where id = $1 for no key update',
    [input.projectId],
  );
  const settings = project.rows[0];
  if (!settings) throw new NotFoundError(`project "${input.projectId}" does not exist`);
  const supersede = settings.cancel_superseded && supersedes(input);
  // A delivery id seen before is the forge repeating itself; the same body
  // under a new id is someone replaying a signed delivery (the signature does
  // not cover the id). Either way the answer is the job it made, and nothing
  // is written: no number taken, nothing superseded.
  const existing = await seenBefore(tx, input);
  if (existing) return { job: existing, duplicate: true, supersedes: false };
  const counter = await tx.query<{ job_counter: number }>(
    'update projects set job_counter = job_counter + 1 where id = $1 returning job_counter',
    [input.projectId],
  );
  const { rows } = await tx.query<JobRow>(
    // A blocked job's compile is not dispatched until it is approved; the
    // sweep only re-dispatches pending jobs.
    `insert into jobs (project_id, number, trigger, ref, sha, base_ref, pull_request, delivery_id,
                       body_sha256, trusted, confirm_writers, trust_reason, rerun_of, state,
                       dispatched_at, compile_attempts, received_at)
     values ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13,
             case when $14 then 'blocked' else 'pending' end,
             case when $14 then null else now() end, 0, coalesce($15::timestamptz, now()))
     returning *`,
    [
      input.projectId,
      counter.rows[0]!.job_counter,
      input.trigger,
      input.ref,
      input.sha,
      input.baseRef ?? null,
      input.pullRequest ?? null,
      input.deliveryId ?? null,
      input.bodySha256 ?? null,
      input.trusted,
      input.confirmWriters?.length ? input.confirmWriters : null,
      input.trustReason ?? null,
      input.rerunOf ?? null,
      // Only an untrusted job is ever held.
      (input.blocked ?? false) && !input.trusted,
      input.receivedAt ?? null,
    ],
  );
  let job = rows[0]!;
  if (input.inputs || input.scheduleName) {
    const given = await tx.query<JobRow>(
      'update jobs set inputs = $2::jsonb, schedule_name = $3 where id = $1 returning *',
      [job.id, input.inputs ? JSON.stringify(input.inputs) : null, input.scheduleName ?? null],
    );
    job = given.rows[0]!;
  }
  if (input.push) {
    const pushed = await tx.query<JobRow>(
      `update jobs set push_before = $2, push_forced = $3, push_created = $4, payload_files = $5
        where id = $1 returning *`,
      [job.id, input.push.before, input.push.forced, input.push.created, input.push.files],
    );
    job = pushed.rows[0]!;
  }
  // Held back a few seconds: a compile that starts the job at once replaces
  // it with "running", and the forge sees one status, not two. A blocked
  // job's is posted at once: nothing follows it by itself.
  if (job.state === 'blocked') await enqueueStatus(tx, job.id, 'pending', WAITING_FOR_APPROVAL);
  else await enqueueStatus(tx, job.id, 'pending', 'waiting for the pipeline to be read', 5);
  return { job, duplicate: false, supersedes: supersede };
}

/**
 * Job creation runs at REPEATABLE READ with immediate retries: every creation
 * of a project but one fails with 40001 each time the project row lock passes
 * on, so N simultaneous pushes to one project need up to N-1 retries (each a
 * few statements on one row). The bound is generous for that reason.
 */
const CREATE = { isolation: 'repeatable read', immediate: true, maxRetries: 64 } as const;

// Which of two jobs of a ref came first: the time their deliveries were
// received, then the number (jobs.received_at, migrations/015).
const RECEIVED = 'coalesce(received_at, created_at)';
// The triggers that supersede (supersedes() above, in SQL).
const SUPERSEDING = `trigger in ('push', 'pull_request') and ref not like 'refs/tags/%'`;

/**
 * Cancels the unfinished jobs of `job`'s ref received before it; and `job`
 * itself when a superseding job of the ref was received after it (a
 * delivery queued while the database resumed, handled after a later one
 * that went straight in). Answers the ids cancelled.
 */
async function cancelSuperseded(pool: Pool, job: JobRow): Promise<string[]> {
  // Its own transaction at READ COMMITTED, after the creation committed: the
  // cancel writes the running tasks of a busy job, and under a snapshot a
  // stream of completions on them starved it (40001 on every try), which
  // would have lost the push. A crash between the two leaves the older job
  // running to its end: wasted work, nothing wrong.
  return transaction(
    pool,
    async (tx) => {
      const newer = await tx.query<{ number: number }>(
        `select number from jobs
          where project_id = $1 and ref = $2 and id <> $3 and ${SUPERSEDING}
            and (${RECEIVED}, number) > ((select ${RECEIVED} from jobs where id = $3), $4)
          order by ${RECEIVED} desc, number desc
          limit 1`,
        [job.project_id, job.ref, job.id, job.number],
      );
      if (newer.rows[0]) {
        return cancelJobsTx(
          tx,
          [job.id],
          `superseded by job #${newer.rows[0].number}, received after it`,
        );
      }
      const older = await tx.query<{ id: string }>(
        `select id from jobs
          where project_id = $1 and ref = $2 and id <> $3 and state = any($5::text[])
            and (${RECEIVED}, number) < ((select ${RECEIVED} from jobs where id = $3), $4)
          order by number`,
        [job.project_id, job.ref, job.id, job.number, UNFINISHED_JOB_STATES],
      );
      // The forge keeps one status per commit and context: a cancelled job of
      // the same commit and trust must not report, or its "cancelled" would
      // land after the new job's status (written in the creation's commit,
      // before this one). One of the other trust reports under the other
      // context, where nothing newer will replace it.
      return cancelJobsTx(
        tx,
        older.rows.map((r) => r.id),
        `superseded by job #${job.number}`,
        { quietFor: { sha: job.sha, trusted: job.trusted } },
      );
    },
    LOCK_WAITING,
  );
}

/**
 * Creates a pending job for a project (blocked, with `blocked`, when it is
 * untrusted). A delivery id or a raw body seen before, even by a creation
 * running at the same moment, answers the existing job. A push then
 * cancels the older unfinished jobs of its ref, when the project says so.
 */
export async function createJob(pool: Pool, input: NewJob): Promise<CreatedJob> {
  let created: { job: JobRow; duplicate: boolean; supersedes: boolean };
  try {
    created = await transaction(pool, (tx) => createJobTx(tx, input), CREATE);
  } catch (err) {
    // The unique keys are the backstop should two first deliveries still meet.
    if (sqlState(err) === SQLSTATE.uniqueViolation) {
      const existing = await seenBefore(pool, input);
      if (existing) return { job: existing, duplicate: true, superseded: [] };
    }
    throw err;
  }
  const superseded = created.supersedes ? await cancelSuperseded(pool, created.job) : [];
  return { job: created.job, duplicate: created.duplicate, superseded };
}

/**
 * Counts a compile attempt of a pending job as the compile starts: the count
 * goes with the compile it pays for, never with a dispatch that may not have
 * happened (a sweep that died after marking the job). Answers the attempts so
 * far, or null when the job is no longer pending.
 */
export async function countCompileAttempt(pool: Pool, jobId: string): Promise<number | null> {
  // A statement of its own, retried on 40001: two compiles of the job (a
  // Lambda retry) count two attempts.
  const rows = await statement<{ compile_attempts: number }>(pool, {
    text: `update jobs set compile_attempts = compile_attempts + 1
            where id = $1 and state = 'pending'
            returning compile_attempts`,
    values: [jobId],
  });
  return rows[0]?.compile_attempts ?? null;
}

/**
 * Inserts a job's tasks and their edges: tasks without needs queued, the rest
 * waiting; a task listing a secret the project lacks failed, naming it, and the
 * tasks reachable from it skipped.
 */
export async function insertTasksTx(
  tx: Queryable,
  job: { id: string; project_id: string; created_at: Date; trusted: boolean },
  specs: TaskSpec[],
): Promise<string[]> {
  if (specs.length === 0) return [];
  const records = specs.map((s) => ({
    position: s.position,
    name: s.name,
    base_name: s.baseName,
    matrix: s.matrix,
    image: s.image,
    script: s.script,
    env: s.env,
    labels: s.labels,
    needs: s.needs,
    secrets: s.secrets,
    outputs: s.outputs,
    allow_failure: s.allowFailure,
    fail_fast: s.failFast ?? false,
    services: s.services ?? [],
    block: s.block ?? null,
    path_skipped: s.pathSkipped ?? null,
    max_attempts: s.maxAttempts,
    timeout_s: s.timeoutS,
    queue_timeout_s: s.queueTimeoutS,
    kept_from: s.kept?.from ?? null,
    kept_attempt: s.kept?.attempt ?? null,
    kept_exit_code: s.kept?.exitCode ?? null,
    kept_started_at: s.kept?.startedAt ?? null,
    kept_finished_at: s.kept?.finishedAt ?? null,
  }));
  // One statement for all tasks; a job can have hundreds.
  await tx.query(
    // `trusted` is the job's, copied so the claim picks from its own pool in
    // the claim index (migrations/003).
    `insert into tasks (job_id, job_created_at, trusted, position, name, base_name, matrix, image,
                        script, env, labels, needs, secrets, outputs, allow_failure, max_attempts,
                        timeout_s, queue_timeout_s, state, queued_at, attempt, exit_code,
                        copied_from, started_at, finished_at, fail_fast, services, block,
                        path_skipped, error, blocked_at, block_deadline)
     select $1, $2, $4, r.position, r.name, r.base_name, r.matrix, r.image, r.script,
            r.env, r.labels, r.needs, r.secrets, r.outputs, r.allow_failure, r.max_attempts,
            r.timeout_s, r.queue_timeout_s, s.state,
            case when s.state = 'queued' then now() end,
            coalesce(r.kept_attempt, 0), r.kept_exit_code, r.kept_from,
            r.kept_started_at,
            case when s.state = 'skipped' then now() else r.kept_finished_at end,
            r.fail_fast, r.services, nullif(r.block, 'null'::jsonb),
            r.path_skipped is not null, r.path_skipped,
            case when s.state = 'blocked' then now() end,
            case when s.state = 'blocked'
                 then now() + make_interval(secs => (r.block ->> 'timeoutS')::int) end
       from jsonb_to_recordset($3::jsonb) as r (
              position int, name text, base_name text, matrix jsonb, image text, script text[],
              env jsonb, labels text[], needs text[], secrets text[], outputs text[],
              allow_failure boolean, max_attempts int, timeout_s int, queue_timeout_s int,
              kept_from uuid, kept_attempt int, kept_exit_code int, kept_started_at timestamptz,
              kept_finished_at timestamptz, fail_fast boolean, services jsonb, block jsonb,
              path_skipped text)
       -- A task its changes: filter left out is stored skipped with the reason
       -- (path_skipped), and a block step with nothing to wait for starts blocked.
       cross join lateral (
              select case when r.kept_from is not null then 'success'
                          when r.path_skipped is not null then 'skipped'
                          when cardinality(r.needs) > 0 then 'waiting'
                          when r.block is not null and r.block <> 'null'::jsonb then 'blocked'
                          else 'queued' end as state) s`,
    [job.id, job.created_at, JSON.stringify(records), job.trusted],
  );
  // `when:` (migrations/012), for the tasks that say something other than
  // the default; before anything below skips what a failure reaches.
  const conditional = specs.filter((s) => s.when !== undefined && s.when !== 'on_success');
  if (conditional.length > 0) {
    await tx.query(
      `update tasks t set run_when = w.run_when
         from jsonb_to_recordset($2::jsonb) as w (name text, run_when text)
        where t.job_id = $1 and t.name = w.name`,
      [job.id, JSON.stringify(conditional.map((s) => ({ name: s.name, run_when: s.when })))],
    );
  }
  // Artifacts and caches (migrations/011), for the tasks that have any.
  const stored = specs.filter((s) => s.storage && Object.keys(s.storage).length > 0);
  if (stored.length > 0) {
    await tx.query(
      `update tasks t set storage = x.storage
         from jsonb_to_recordset($2::jsonb) as x (name text, storage jsonb)
        where t.job_id = $1 and t.name = x.name`,
      [job.id, JSON.stringify(stored.map((s) => ({ name: s.name, storage: s.storage })))],
    );
  }
  await tx.query(
    `insert into task_needs (task_id, need_id)
     select c.id, p.id
       from tasks c
       cross join lateral unnest(c.needs) as n (name)
       join tasks p on p.job_id = c.job_id and p.name = n.name
      where c.job_id = $1`,
    [job.id],
  );
  if (specs.some((s) => s.kept)) {
    await tx.query(
      `insert into task_outputs (task_id, name, value)
       select t.id, o.name, o.value
         from tasks t join task_outputs o on o.task_id = t.copied_from
        where t.job_id = $1`,
      [job.id],
    );
  }
  const missing = await tx.query<{ id: string; name: string; allow_failure: boolean }>(
    `update tasks t
        set state = 'failed', finished_at = now(), queued_at = null,
            error = m.message
       from (select t.id,
                    -- Each message ends with the command that sets what is missing
                    -- (the CLI reads the value from standard input).
                    case when count(*) = 1
                         then format('secret %s is not set for project %s; set it with: npm run ctl -- secret set --project %s --name %s',
                                     string_agg(s.name, ', '), $2::text, $2::text, string_agg(s.name, ', '))
                         else format('secrets %s are not set for project %s; set each with: %s',
                                     string_agg(s.name, ', ' order by s.name), $2::text,
                                     string_agg(format('npm run ctl -- secret set --project %s --name %s', $2::text, s.name),
                                                '; ' order by s.name)) end as message
               from tasks t cross join lateral unnest(t.secrets) as s (name)
              where t.job_id = $1
                and not exists (select 1 from project_secrets ps
                                 where ps.project_id = $2 and ps.name = s.name)
              group by t.id) m
      where t.id = m.id and t.state in ('queued', 'waiting')
      returning t.id, t.name, t.allow_failure`,
    [job.id, job.project_id],
  );
  for (const row of missing.rows) {
    if (!row.allow_failure) await skipReachable(tx, [row.id], `skipped: ${row.name} failed`);
  }
  // Concurrency groups: the tasks join theirs; a group's mode may stop older
  // jobs' tasks in it (lib/scheduler/concurrency.ts), answered to follow up.
  const touched = await joinGroupsTx(tx, job, specs);
  // What needs a task left out by its changes: filter does not run either,
  // as for any skipped need.
  for (const spec of specs) {
    if (spec.pathSkipped === undefined) continue;
    const { rows } = await tx.query<{ id: string }>(
      'select id from tasks where job_id = $1 and name = $2',
      [job.id, spec.name],
    );
    if (rows[0]) await skipReachable(tx, [rows[0].id], `skipped: ${spec.name} did not run`);
  }
  return touched;
}

export interface StartResult {
  /** False when the job was no longer pending (a second compile of the same job). */
  started: boolean;
  state: JobState;
  /** The job's final state when starting it settled it (no tasks, or none runnable). */
  jobState: JobState | null;
}

/**
 * Starts a pending job with its compiled tasks. Conditional on 'pending', so a
 * compile invoked twice starts it once.
 */
export async function startJob(
  pool: Pool,
  jobId: string,
  pipeline: {
    name: string | null;
    tasks: TaskSpec[];
    inputs?: unknown[];
    concurrency?: CompiledConcurrency;
  },
  diff: {
    base: string | null;
    files: string[] | null;
    count: number | null;
    note: string;
  } | null = null,
): Promise<StartResult> {
  const started = await transaction(pool, async (tx) => {
    // FOR UPDATE: a second compile blocks here, then raises 40001 once the
    // first commits; its retry reads 'running' and stops.
    const { rows } = await tx.query<JobRow>('select * from jobs where id = $1 for update', [jobId]);
    const job = rows[0];
    if (!job) throw new NotFoundError(`job ${jobId} does not exist`);
    if (job.state !== 'pending') return { started: false, state: job.state };
    const touched = await insertTasksTx(tx, job, pipeline.tasks);
    if (pipeline.concurrency) await joinJobGroupTx(tx, job, pipeline.concurrency);
    await tx.query(
      `update jobs set state = 'running', started_at = now(), pipeline_name = $2,
                       error = null, errors = null
        where id = $1`,
      [jobId, pipeline.name],
    );
    if (pipeline.inputs?.length) {
      await tx.query('update jobs set declared_inputs = $2::jsonb where id = $1', [
        jobId,
        JSON.stringify(pipeline.inputs),
      ]);
    }
    if (diff) {
      // What the changes: filters were decided on (lib/app/changes.ts), for the job page.
      await tx.query(
        `update jobs set diff_base = $2, diff_files = $3, diff_count = $4, diff_note = $5
          where id = $1`,
        [jobId, diff.base, diff.files, diff.count, diff.note],
      );
    }
    const n = pipeline.tasks.length;
    await enqueueStatus(tx, jobId, 'pending', `running ${n} task${n === 1 ? '' : 's'}`);
    await noteBlockedTx(tx, jobId);
    return { started: true, state: 'running' as JobState, touched };
  });
  if (!started.started) return { started: false, state: started.state, jobState: null };
  // Older jobs whose tasks this one's concurrency groups stopped: settle them.
  for (const other of started.touched ?? []) await followUpAfterCommit(pool, other);
  // The job's own group's mode, on older jobs of the group (after the commit).
  if (pipeline.concurrency && pipeline.concurrency.mode !== 'queue') {
    await applyJobGroupMode(pool, jobId);
  }
  const follow = await followUpAfterCommit(pool, jobId);
  const jobState = follow?.jobState ?? null;
  return { started: true, state: jobState ?? 'running', jobState };
}

/** Fails a pending job whose pipeline did not compile, keeping every error. Answers false if it was not pending. */
export async function failJob(
  pool: Pool,
  jobId: string,
  error: string,
  errors: JobErrorEntry[] | null = null,
): Promise<boolean> {
  return transaction(pool, async (tx) => {
    const { rowCount } = await tx.query(
      `update jobs set state = 'failed', error = $2, errors = $3::jsonb, finished_at = now()
        where id = $1 and state = 'pending'`,
      [jobId, error, errors === null ? null : JSON.stringify(errors)],
    );
    if (rowCount !== 1) return false;
    const problems = errors?.length ?? 0;
    await enqueueStatus(
      tx,
      jobId,
      'error',
      problems > 0
        ? `the pipeline has ${problems} error${problems === 1 ? '' : 's'}: ${error.split('\n')[0]}`
        : error,
    );
    return true;
  });
}

/** Records why a compile could not run yet (the forge was down) on a job left pending for the sweep to retry. */
export async function noteCompileError(pool: Pool, jobId: string, error: string): Promise<void> {
  await transaction(pool, (tx) =>
    tx.query(`update jobs set error = $2 where id = $1 and state = 'pending'`, [jobId, error]),
  );
}

/** A job by id, or undefined. */
export async function getJob(db: Queryable, jobId: string): Promise<JobRow | undefined> {
  const { rows } = await db.query<JobRow>('select * from jobs where id = $1', [jobId]);
  return rows[0];
}
