// What a pipeline file says to a manual trigger and to a dry run (`ctl
// validate`), apart from lib/app/jobs.ts so that the api function loads the
// compiler and yaml only when a request needs them (docs/architecture.md,
// "Bundles"): the inputs a trigger gives checked against the file's
// `inputs:`, and what a job for a trigger would run.
import { parse as parseYaml } from 'yaml';
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
import { checkInputs, declaredInputsOf } from '../pipeline/inputs.ts';
import { PIPELINE_FILE } from '../pipeline/limits.ts';
import { WhenSchema, whenLeavesOut } from '../pipeline/when.ts';

export { formatIssue, type PipelineIssue } from '../pipeline/index.ts';

/**
 * The problems (each naming `inputs.<name>`) of inputs given to a trigger
 * that the pipeline file `text` at `sha` does not take; null when there are
 * none, or when its `inputs:` cannot be told (the compile reports that).
 */
export function inputProblems(
  text: string,
  given: Record<string, unknown>,
  sha: string,
): { path: string; message: string }[] | null {
  const declared = declaredInputsOf(text);
  if (declared === null) return null;
  const { problems } = checkInputs(declared, given, true);
  if (problems.length === 0) return null;
  return problems.map((p) => ({
    path: `inputs.${p.name}`,
    message:
      p.kind === 'undeclared'
        ? `not declared by ${PIPELINE_FILE} at ${sha.slice(0, 12)}; ${p.detail}`
        : p.detail,
  }));
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
