// The admin API's actions on jobs: a manual trigger, cancel, approve and
// rerun. Each changes the job in the scheduler's transaction, then sets it on
// its way (triggerJob) or posts its status. And the dry run of a job
// (`ctl validate`): what a pipeline file compiles to, with no server.
import { parse as parseYaml } from 'yaml';
import { z } from 'zod';
import type { AppContext } from '../context.ts';
import {
  type CompiledPipeline,
  compilePipeline,
  type IncludedFile,
  MAX_INCLUDE_ROUNDS,
  needsFiles,
  PipelineError,
  type PipelineIssue,
  type Trigger as PipelineTrigger,
  refMatches,
  unsettledIncludes,
} from '../pipeline/index.ts';

import { WhenSchema, whenLeavesOut } from '../pipeline/when.ts';

export { formatIssue, type PipelineIssue } from '../pipeline/index.ts';

import { NotFoundError, UnavailableError, ValidationError } from '../errors.ts';
import { resolveHead } from '../forge/branch.ts';
import { ForgeUnavailableError, fetchPipelineFile } from '../forge/pipeline-file.ts';
import { ADMIN_BEARER } from '../people/sessions.ts';
import { checkInputs, declaredInputsOf } from '../pipeline/inputs.ts';
import { PIPELINE_FILE } from '../pipeline/limits.ts';
import { approveJob, cancelJob, createJob, type JobRow, rerunJob } from '../scheduler/index.ts';
import { getJobOnly, type JobView } from '../scheduler/views.ts';
import { audit, type Person } from './audit.ts';
import { projectToken } from './forge-token.ts';
import { tasksClaimable } from './pickup.ts';
import { branchSource, getProject, getProjectRow } from './projects.ts';
import { InputValuesSchema } from './schedules.ts';
import { deliverJobStatus } from './statuses.ts';
import { triggerJob } from './trigger.ts';

const SHA = /^[0-9a-f]{40}([0-9a-f]{24})?$/;

export const TriggerSchema = z.strictObject({
  ref: z
    .string()
    .min(1)
    .max(1024)
    .refine((r) => !/\s/.test(r), 'must not contain white space'),
  sha: z
    .string()
    .transform((s) => s.toLowerCase())
    .refine((s) => SHA.test(s), 'must be a full commit sha (40 or 64 hex digits)')
    .optional(),
  // Checked against the pipeline's `inputs:` at the commit before the job is
  // made (checkRunInputs), and again when it compiles.
  inputs: InputValuesSchema.optional(),
});
export type Trigger = z.infer<typeof TriggerSchema>;

export const RerunSchema = z.strictObject({ failed_only: z.boolean().default(false) });

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
  const declared = declaredInputsOf(text);
  if (declared === null) return;
  const { problems } = checkInputs(declared, given, true);
  if (problems.length === 0) return;
  throw new ValidationError(
    problems.map((p) => ({
      path: `inputs.${p.name}`,
      message:
        p.kind === 'undeclared'
          ? `not declared by ${PIPELINE_FILE} at ${sha.slice(0, 12)}; ${p.detail}`
          : p.detail,
    })),
  );
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

/** A task of the pipeline file that a job for the trigger would not have, and why. */
export interface LeftOutTask {
  name: string;
  /** `only: ... does not match <ref>`, or the tasks it needs that are left out. */
  reason: string;
}

/** What a job for a trigger would run: its tasks, and the tasks `only` leaves out. */
export interface PipelinePlan {
  pipeline: CompiledPipeline;
  leftOut: LeftOutTask[];
}

/**
 * What a job for `trigger` would run, compiled by the server's compiler from
 * `text`, the files its `include:` names read with `readFile` (a path from the
 * repository root): the tasks and those left out, or every problem the
 * compile found.
 */
export async function planPipeline(
  text: string,
  trigger: PipelineTrigger,
  readFile: (path: string) => Promise<IncludedFile>,
): Promise<PipelinePlan | { issues: PipelineIssue[] }> {
  const files = new Map<string, IncludedFile>();
  // One round per level of `include:`, and one more, as the compile of a job
  // (lib/app/compile.ts); the compiler bounds the depth itself.
  for (let round = 0; ; round++) {
    let result: Awaited<ReturnType<typeof compilePipeline>>;
    try {
      result = compilePipeline(text, trigger, files);
    } catch (err) {
      if (err instanceof PipelineError) return { issues: err.issues };
      throw err;
    }
    if (!needsFiles(result)) {
      const texts = [text, ...[...files.values()].flatMap((f) => ('text' in f ? [f.text] : []))];
      return { pipeline: result, leftOut: leftOutTasks(texts, result, trigger) };
    }
    if (round >= MAX_INCLUDE_ROUNDS) return { issues: [unsettledIncludes(result.toRead)] };
    for (const path of result.toRead) files.set(path, await readFile(path));
  }
}

type RawTask = { only?: unknown; needs?: unknown; extends?: unknown; when?: unknown };

/**
 * The tasks of the files (already compiled without a problem) that the
 * compiled pipeline lacks: `only` left them out, or a task they need. The
 * compiler answers only the tasks it keeps, so this reads the files again for
 * the names, and for each its `only` and `needs`, as written or inherited
 * through `extends` (the last parent that has the key wins; the task's own
 * wins over all).
 */
function leftOutTasks(
  texts: string[],
  compiled: CompiledPipeline,
  trigger: PipelineTrigger,
): LeftOutTask[] {
  const tasks = new Map<string, RawTask>();
  for (const text of texts) {
    let doc: { tasks?: Record<string, RawTask> } | null;
    try {
      doc = parseYaml(text);
    } catch {
      // The compiler took it; only this explanation goes without its tasks.
      continue;
    }
    for (const [name, value] of Object.entries(doc?.tasks ?? {})) {
      if (!tasks.has(name)) tasks.set(name, value ?? {});
    }
  }
  const inherited = (name: string, key: keyof RawTask, depth = 0): unknown => {
    const task = tasks.get(name);
    if (!task || depth > 20) return undefined;
    if (task[key] !== undefined) return task[key];
    const parents = typeof task.extends === 'string' ? [task.extends] : task.extends;
    if (!Array.isArray(parents)) return undefined;
    for (const parent of [...parents].reverse()) {
      const found = typeof parent === 'string' ? inherited(parent, key, depth + 1) : undefined;
      if (found !== undefined) return found;
    }
    return undefined;
  };
  const kept = new Set(compiled.tasks.map((t) => t.baseName));
  const names = [...tasks.keys()].filter((name) => !name.startsWith('.') && !kept.has(name));
  const out = new Set(names);
  return names.map((name) => {
    const only = inherited(name, 'only');
    const patterns = (Array.isArray(only) ? only : [only]).filter(
      (p): p is string => typeof p === 'string',
    );
    if (patterns.length > 0 && !patterns.some((p) => refMatches(p, trigger))) {
      return { name, reason: `only: ${patterns.join(', ')} does not match ${trigger.ref}` };
    }
    const when = WhenSchema.safeParse(inherited(name, 'when'));
    const byWhen = when.success ? whenLeavesOut(when.data, trigger) : null;
    if (byWhen) return { name, reason: byWhen };
    const needs = inherited(name, 'needs');
    const gone = (Array.isArray(needs) ? needs : []).filter(
      (n): n is string => typeof n === 'string' && out.has(n),
    );
    return {
      name,
      reason: gone.length > 0 ? `needs ${gone.join(', ')}, left out` : 'left out',
    };
  });
}
