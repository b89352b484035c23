// Compiling a job: settle its trust when the forge must confirm it, read
// .conductor.yml at the job's commit from the forge (or a local repository),
// and the files its `include:` names from the same commit the same way,
// compile it, and start the job with its tasks or fail it with every error. No
// transaction is open while the forge is asked.
import type { AppContext } from '../context.ts';
import type { Pool } from '../db/index.ts';
import { confirmWriters, type WriterVerdict } from '../forge/permission.ts';
import {
  ForgeUnavailableError,
  fetchPipelineFile,
  type PipelineSource,
} from '../forge/pipeline-file.ts';
import { forgeOf } from '../forge/registry.ts';
import { log } from '../log.ts';
import {
  type CompiledPipeline,
  compilePipeline,
  formatIssue,
  type IncludedFile,
  MAX_INCLUDE_ROUNDS,
  needsFiles,
  type PipelineCompiler,
  PipelineError,
  unsettledIncludes,
} from '../pipeline/index.ts';
import {
  countCompileAttempt,
  failJob,
  getJob,
  type JobRow,
  noteCompileError,
  settleJobTrust,
  startJob,
} from '../scheduler/index.ts';
import { noteScheduledJobFailed } from '../schedules/store.ts';
import type { Keyring } from '../secrets.ts';
import { decideChanges } from './changes.ts';
import { type AppConfig, projectToken } from './forge-token.ts';
import { tasksClaimable } from './pickup.ts';
import { forgeToken, getProjectRow, type ProjectRow } from './projects.ts';
import { deliverJobStatus } from './statuses.ts';

/** `blocked`: the forge did not confirm the job's trust and it waits for approval; `ignored`: nor did it, and the project ignores untrusted jobs. */
export type CompileOutcome =
  | 'started'
  | 'failed'
  | 'not_pending'
  | 'forge_unavailable'
  | 'blocked'
  | 'ignored';

/**
 * Compiles a pending job; safe to run twice for the same job (the second finds it started).
 * `compile` runs the compiler: inline by default, on a worker thread locally (lib/app/dispatch.ts).
 */
export async function compileJob(
  pool: Pool,
  keyring: Keyring,
  config: AppConfig,
  jobId: string,
  compile: PipelineCompiler = compilePipeline,
): Promise<CompileOutcome> {
  const job = await getJob(pool, jobId);
  if (!job || job.state !== 'pending') return 'not_pending';
  const project = await getProjectRow(pool, job.project_id);
  if (!project) return 'not_pending';
  // Counted here, as the compile starts, not where it was dispatched: the
  // sweep fails a job left pending after its last counted attempt.
  if ((await countCompileAttempt(pool, jobId)) === null) return 'not_pending';

  // Before the pipeline file: an unconfirmed job must not be compiled on the
  // trust it does not have yet, and one left blocked is not read at all.
  if (job.confirm_writers !== null) {
    let settled: Awaited<ReturnType<typeof confirmTrust>>;
    try {
      settled = await confirmTrust(pool, keyring, project, job);
    } catch (err) {
      if (err instanceof ForgeUnavailableError) return unavailable(pool, jobId, err);
      throw err;
    }
    if (settled !== 'pending') return settled;
  }

  // The control plane reads the file with the project's token (or the
  // GitHub App's installation token) even for a fork's pull request: the
  // token never reaches that job's runner.
  let token: string | null;
  try {
    token = await projectToken({ config, pool, keyring }, project);
  } catch (err) {
    if (err instanceof ForgeUnavailableError) return unavailable(pool, jobId, err);
    throw err;
  }
  const source: PipelineSource = {
    forge: project.forge,
    repo: project.repo,
    repoUrl: project.repo_url,
    forgeUrl: project.forge_url,
    githubApiUrl: config.CONDUCTOR_GITHUB_API_URL,
    token,
    sha: job.sha,
  };
  let text: string;
  try {
    const file = await fetchPipelineFile(source);
    if (!file.found) {
      await failJob(pool, jobId, file.reason);
      return 'failed';
    }
    text = file.text;
  } catch (err) {
    if (err instanceof ForgeUnavailableError) return unavailable(pool, jobId, err);
    throw err;
  }

  const trigger = {
    ref: job.ref,
    // A rerun of a job that never compiled is compiled as its original was
    // triggered (its inputs and schedule are copied by lib/scheduler/rerun.ts).
    event: job.trigger === 'rerun' ? await originalTrigger(pool, job.id) : job.trigger,
    baseRef: job.base_ref,
    schedule: job.schedule_name,
    inputs: job.inputs,
    orgGroups: project.org_groups,
  };
  const files = new Map<string, IncludedFile>();
  let compiled: CompiledPipeline | null = null;
  // Each round compiles with the files read so far and reads the ones the
  // compile names next: one round per level of `include:`, and one more.
  for (let round = 0; compiled === null; round++) {
    let result: Awaited<ReturnType<PipelineCompiler>>;
    try {
      result = await compile(text, trigger, files);
    } catch (err) {
      if (err instanceof PipelineError) {
        await failJob(pool, jobId, err.issues.map((i) => formatIssue(i)).join('\n'), err.issues);
        return 'failed';
      }
      throw err;
    }
    if (!needsFiles(result)) {
      compiled = result;
      break;
    }
    // The compiler bounds the depth and the files; the rounds are bounded here.
    if (round >= MAX_INCLUDE_ROUNDS) {
      const issue = unsettledIncludes(result.toRead);
      await failJob(pool, jobId, formatIssue(issue), [issue]);
      return 'failed';
    }
    try {
      // The files of one level at once, outside any transaction. A file the
      // commit lacks (or the forge refuses) is the compiler's to report, at
      // the include that names it; an outage leaves the job pending.
      const read = await Promise.all(
        result.toRead.map((path) => fetchPipelineFile(source, { path })),
      );
      result.toRead.forEach((path, i) => {
        const file = read[i];
        if (file) files.set(path, file.found ? { text: file.text } : { error: file.reason });
      });
    } catch (err) {
      if (err instanceof ForgeUnavailableError) return unavailable(pool, jobId, err);
      throw err;
    }
  }
  // changes: filters, decided outside any transaction (it may ask the forge).
  let decision: Awaited<ReturnType<typeof decideChanges>>;
  try {
    decision = await decideChanges(job, source, compiled.tasks);
  } catch (err) {
    if (err instanceof ForgeUnavailableError) return unavailable(pool, jobId, err);
    throw err;
  }
  const started = await startJob(
    pool,
    jobId,
    { ...compiled, tasks: decision.tasks },
    decision.diff,
  );
  return started.started ? 'started' : 'not_pending';
}

/**
 * The compile use case, as the compile function and the in-process dispatcher
 * run it: compiles the job, then posts its new commit status.
 */
export async function runCompile(
  ctx: AppContext,
  jobId: string,
  compile: PipelineCompiler = compilePipeline,
): Promise<CompileOutcome> {
  const outcome = await compileJob(ctx.pool, ctx.keyring, ctx.config, jobId, compile);
  // Before the status post (a call to the forge): runners start now.
  if (outcome === 'started') await tasksClaimable(ctx, 'compile', jobId);
  await deliverJobStatus(ctx, jobId);
  // A scheduled job whose pipeline is broken: its schedule says so (last_error).
  if (outcome === 'failed') await noteScheduledJobFailed(ctx.pool, jobId);
  return outcome;
}

async function unavailable(
  pool: Pool,
  jobId: string,
  err: ForgeUnavailableError,
): Promise<'forge_unavailable'> {
  // Left pending: the sweep dispatches the compile again, and fails the job
  // with this reason after its last attempt.
  await noteCompileError(pool, jobId, err.message);
  log('warn', 'the forge is unavailable; the compile will be retried', { job_id: jobId, err });
  return 'forge_unavailable';
}

/**
 * Asks Gitea, outside any transaction, whether the people behind a pull
 * request from the repository itself may write to it, then settles the job's
 * trust in one transaction (lib/scheduler/trust.ts): trusted, or untrusted and
 * then blocked, cancelled or left to run as the project's fork_pull_requests
 * says. Answers 'pending' when the compile goes on. An unreachable Gitea is a
 * ForgeUnavailableError: an outage never settles trust.
 */
async function confirmTrust(
  pool: Pool,
  keyring: Keyring,
  project: ProjectRow,
  job: JobRow,
): Promise<'pending' | 'blocked' | 'ignored' | 'not_pending'> {
  const token = forgeToken(keyring, project);
  const logins = job.confirm_writers ?? [];
  const forge = forgeOf(project.forge);
  const verdict: WriterVerdict =
    token && project.forge_url && forge.permission.confirmsWriters
      ? await confirmWriters({
          forge: project.forge,
          forgeUrl: project.forge_url,
          repo: project.repo,
          token,
          logins,
        })
      : {
          writers: false,
          reason: `without a forge token and forge_url ${forge.title} cannot confirm that ${logins.join(' and ')} may write`,
        };
  const state = await settleJobTrust(pool, job.id, {
    trusted: verdict.writers,
    reason: verdict.reason,
  });
  if (state === 'blocked') return 'blocked';
  if (state === 'cancelled') return 'ignored';
  if (state === 'pending') return 'pending';
  // Another compile of this job settled it first: go on with what it settled.
  const now = await getJob(pool, job.id);
  return now?.state === 'pending' && now.confirm_writers === null ? 'pending' : 'not_pending';
}

/** The trigger of the job a rerun (of a rerun...) started from. */
async function originalTrigger(pool: Pool, jobId: string): Promise<JobRow['trigger']> {
  const { rows } = await pool.query<{ trigger: JobRow['trigger'] }>(
    `with recursive chain(id, trigger, rerun_of, depth) as (
       select id, trigger, rerun_of, 0 from jobs where id = $1
       union all
       select j.id, j.trigger, j.rerun_of, c.depth + 1
         from jobs j join chain c on j.id = c.rerun_of
        where c.depth < 1000
     )
     select trigger from chain order by depth desc limit 1`,
    [jobId],
  );
  return rows[0]?.trigger ?? 'rerun';
}
