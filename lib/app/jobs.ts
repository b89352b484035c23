// The admin API's actions on jobs: a manual trigger, cancel, approve and
// rerun. Each changes the job in the scheduler's transaction, then sets it on
// its way (triggerJob) or posts its status. And the dry run of a job
// (`ctl validate`): what a pipeline file compiles to, with no server.
import type { AppContext } from '../context.ts';
import { NotFoundError, UnavailableError, ValidationError } from '../errors.ts';
import { resolveHead } from '../forge/branch.ts';
import { ForgeUnavailableError, fetchPipelineFile } from '../forge/pipeline-file.ts';
import { ADMIN_BEARER } from '../people/sessions.ts';
import type { IncludedFile, PipelineIssue, Trigger as PipelineTrigger } from '../pipeline/index.ts';
import { approveJob, cancelJob, createJob, type JobRow, rerunJob } from '../scheduler/index.ts';
import { getJobOnly, type JobView } from '../scheduler/views.ts';
import * as z from '../zod.ts';
import { audit, type Person } from './audit.ts';
import { projectToken } from './forge-token.ts';
import { InputValuesSchema } from './input-values.ts';
import { tasksClaimable } from './pickup.ts';
import type { PipelinePlan } from './plan.ts';
import { branchSource, getProject, getProjectRow } from './projects.ts';
import { deliverJobStatus } from './statuses.ts';
import { triggerJob } from './trigger.ts';

export type { LeftOutTask, PipelinePlan } from './plan.ts';

const SHA = /^[0-9a-f]{40}([0-9a-f]{24})?$/;

export const TriggerSchema = z.strictObject({
  ref: z.string().check(
    z.minLength(1),
    z.maxLength(1024),
    z.refine((r) => !/\s/.test(r), 'must not contain white space'),
  ),
  sha: z.optional(
    z
      .pipe(
        z.string(),
        z.transform((s: string) => s.toLowerCase()),
      )
      .check(z.refine((s) => SHA.test(s), 'must be a full commit sha (40 or 64 hex digits)')),
  ),
  // Checked against the pipeline's `inputs:` at the commit before the job is
  // made (checkRunInputs), and again when it compiles.
  inputs: z.optional(InputValuesSchema),
});
export type Trigger = z.infer<typeof TriggerSchema>;

export const RerunSchema = z.strictObject({ failed_only: z._default(z.boolean(), false) });

/**
 * A trusted job of the project for a commit, asked for by an admin; a ref
 * without `refs/` names a branch, and without `sha` the job runs the ref's
 * head, asked of the forge (lib/forge/branch.ts): a ref without one is a 422
 * naming it, a forge that does not answer a 503. `inputs` go to the
 * pipeline's `inputs:`. It supersedes nothing (only a push does).
 */
export async function startManualJob(
  ctx: AppContext,
  projectId: string,
  { ref, sha, inputs }: Trigger,
  by: Person = ADMIN_BEARER,
): Promise<JobRow> {
  await getProject(ctx.pool, projectId);
  const full = ref.startsWith('refs/') ? ref : `refs/heads/${ref}`;
  const head = sha ?? (await headOf(ctx, projectId, full));
  await checkRunInputs(ctx, projectId, head, inputs ?? {});
  const { job, superseded } = await createJob(ctx.pool, {
    projectId,
    ref: full,
    sha: head,
    trigger: 'manual',
    trusted: true,
    inputs: inputs && Object.keys(inputs).length > 0 ? inputs : null,
  });
  const given = Object.keys(inputs ?? {});
  await audit(ctx.pool, by, {
    projectId,
    jobId: job.id,
    action: 'run',
    detail: `${full} at ${head.slice(0, 12)} as job #${job.number}${given.length ? `, inputs ${given.join(', ')}` : ''}`,
  });
  await triggerJob(ctx, job, superseded);
  return job;
}

/**
 * Refuses (400, naming each input) inputs the pipeline file at `sha` does not
 * take: an input it does not declare, a value of the wrong type or outside a
 * choice's options, a required input left out. The file is read as the
 * compile reads it, outside any transaction; when it cannot be read (the
 * forge down, no file) or its `inputs:` cannot be told, nothing is refused
 * here and the compile reports what is wrong, as it always did.
 */
async function checkRunInputs(
  ctx: AppContext,
  projectId: string,
  sha: string,
  given: Record<string, unknown>,
): Promise<void> {
  const project = await getProjectRow(ctx.pool, projectId);
  if (!project) throw new NotFoundError(`project "${projectId}" does not exist`);
  let text: string;
  try {
    const file = await fetchPipelineFile({
      ...branchSource(ctx.config, ctx.keyring, project),
      sha,
    });
    if (!file.found) return;
    text = file.text;
  } catch (err) {
    if (err instanceof ForgeUnavailableError) return;
    throw err;
  }
  // The pipeline's reading of `inputs:` (and yaml) is loaded by a manual
  // trigger, not at the api's cold start (docs/architecture.md, "Bundles").
  const { inputProblems } = await import('./plan.ts');
  const problems = inputProblems(text, given, sha);
  if (problems) throw new ValidationError(problems);
}

/** The head commit of a project's ref, asked outside any transaction. */
async function headOf(ctx: AppContext, projectId: string, ref: string): Promise<string> {
  const project = await getProjectRow(ctx.pool, projectId);
  if (!project) throw new NotFoundError(`project "${projectId}" does not exist`);
  let head: Awaited<ReturnType<typeof resolveHead>>;
  try {
    // A project served by the GitHub App reads it with its installation's token.
    const source = {
      ...branchSource(ctx.config, ctx.keyring, project),
      token: await projectToken(ctx, project),
    };
    head = await resolveHead(source, ref);
  } catch (err) {
    if (err instanceof ForgeUnavailableError) {
      throw new UnavailableError(`${err.message}; give "sha" or try again`, { cause: err });
    }
    throw err;
  }
  if (!head.found) throw new ValidationError([{ path: 'ref', message: head.reason }]);
  return head.sha;
}

/** Cancels a job (a 409 once it is finished) and posts its status; answers the job as cancelled. */
export async function cancelJobNow(
  ctx: AppContext,
  jobId: string,
  by: Person = ADMIN_BEARER,
): Promise<JobView> {
  await cancelJob(ctx.pool, jobId, 'cancelled through the API');
  // Its concurrency groups' places are free for other jobs' tasks.
  await tasksClaimable(ctx, 'cancel', jobId);
  await deliverJobStatus(ctx, jobId);
  const view = await getJobOnly(ctx.pool, jobId);
  await audit(ctx.pool, by, {
    projectId: view.project_id,
    jobId,
    action: 'cancel',
    detail: `job #${view.number}`,
  });
  return view;
}

/** Lets a blocked job go on; answers it as approved (pending), then dispatches its compile. */
export async function approveBlockedJob(
  ctx: AppContext,
  jobId: string,
  by: Person = ADMIN_BEARER,
): Promise<JobView> {
  const approved = await approveJob(ctx.pool, jobId);
  const view = await getJobOnly(ctx.pool, jobId);
  await audit(ctx.pool, by, {
    projectId: view.project_id,
    jobId,
    action: 'approve',
    detail: `job #${view.number}`,
  });
  await triggerJob(ctx, approved);
  return view;
}

/** Runs a finished job again as a new job (only its failed tasks with `failedOnly`). */
export async function rerunFinishedJob(
  ctx: AppContext,
  jobId: string,
  failedOnly: boolean,
  by: Person = ADMIN_BEARER,
): Promise<JobRow> {
  const { job } = await rerunJob(ctx.pool, jobId, failedOnly);
  await audit(ctx.pool, by, {
    projectId: job.project_id,
    jobId,
    action: 'rerun',
    detail: `${failedOnly ? 'failed tasks only, ' : ''}as job #${job.number}`,
  });
  await triggerJob(ctx, job);
  return job;
}

/**
 * What a job for `trigger` would run, compiled by the server's compiler from
 * `text`, the files its `include:` names read with `readFile`: the tasks and
 * those left out, or every problem the compile found (lib/app/plan.ts, loaded
 * when asked, not at a cold start).
 */
export async function planPipeline(
  text: string,
  trigger: PipelineTrigger,
  readFile: (path: string) => Promise<IncludedFile>,
): Promise<PipelinePlan | { issues: PipelineIssue[] }> {
  return (await import('./plan.ts')).planPipeline(text, trigger, readFile);
}
