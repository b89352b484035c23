import type { Trigger } from './glob.ts';
import { refMatches } from './glob.ts';
import { withDependents } from './graph.ts';
import { PipelineError } from './issues.ts';
import { MAX_PIPELINE_BYTES } from './limits.ts';
import { planTasks, type TaskPlan } from './plan.ts';
import {
  checkPipelineFile,
  DEFAULT_RETRIES,
  DEFAULT_TIMEOUT_S,
  type PipelineFile,
  type Task,
} from './schema.ts';
import { asWritten, type Loc, locAt, locate, readSource } from './source.ts';

/** One task of a job, ready to be stored: defaults applied, matrix expanded, needs resolved. */
export interface CompiledTask {
  /** `build`, or for a matrix expansion `test (node: 20, os: linux)`. */
  name: string;
  /** The key under `tasks:`. */
  baseName: string;
  /** This expansion's matrix values, as written; {} when the task has no matrix. */
  matrix: Record<string, string>;
  image: string | null;
  script: string[];
  /** defaults.env merged with the task's env, the task winning. */
  env: Record<string, string>;
  /** Sorted and distinct. */
  labels: string[];
  /** Compiled names of the tasks it needs: every expansion of a matrix task. */
  needs: string[];
  secrets: string[];
  outputs: string[];
  allowFailure: boolean;
  maxAttempts: number;
  timeoutS: number;
  /** 0-based order in the job: file order, matrix expansions in cartesian order. */
  position: number;
}

/** What a pipeline file compiles to for one trigger. */
export interface CompiledPipeline {
  name: string | null;
  tasks: CompiledTask[];
}

/** Compiles the text of a pipeline file for a trigger; throws PipelineError, and only that. */
export function compilePipeline(text: string, trigger: Trigger): CompiledPipeline {
  try {
    return compile(text, trigger);
  } catch (error) {
    if (error instanceof PipelineError) throw error;
    // Callers rely on seeing nothing but PipelineError; a bug here must fail the job, not the worker.
    const message = error instanceof Error ? error.message : 'unknown error';
    throw new PipelineError(
      [{ line: 1, column: 1, path: '', message: `internal compiler error: ${message}` }],
      { cause: error },
    );
  }
}

function compile(text: string, trigger: Trigger): CompiledPipeline {
  if (typeof text !== 'string') {
    throw new PipelineError([
      { line: 1, column: 1, path: '', message: 'the pipeline file must be text' },
    ]);
  }
  // Checked before parsing: the limit exists to keep the parser away from huge input.
  const bytes = Buffer.byteLength(text, 'utf8');
  if (bytes > MAX_PIPELINE_BYTES) {
    const message = `the file is ${bytes} bytes; at most ${MAX_PIPELINE_BYTES} bytes (1 MiB) are allowed`;
    throw new PipelineError([{ line: 1, column: 1, path: '', message }]);
  }
  const source = readSource(text);
  const { issues } = source;
  if (!source.ok) throw issues.toError();
  if (source.empty) {
    issues.add(0, [], 'the file is empty; it needs at least version and tasks');
    throw issues.toError();
  }
  const { file, problems } = checkPipelineFile(source.value);
  for (const problem of problems) {
    issues.add(locate(source.loc, problem.at, problem.target), problem.path, problem.message);
  }
  const plans = planTasks(source.value, source.loc, issues);
  if (issues.size > 0 || file === null || plans === null) {
    if (issues.size === 0) issues.add(0, [], 'the pipeline could not be compiled');
    throw issues.toError();
  }
  return build(file, plans, source.loc, trigger);
}

function build(
  file: PipelineFile,
  plans: TaskPlan[],
  root: Loc,
  trigger: Trigger,
): CompiledPipeline {
  const definitions = new Map<string, Task>(Object.entries(file.tasks));
  const graph = new Map(plans.map((plan) => [plan.key, plan.needs]));
  const missed = plans
    .filter((plan) => {
      const only = definitions.get(plan.key)?.only;
      return only !== undefined && !only.some((pattern) => refMatches(pattern, trigger));
    })
    .map((plan) => plan.key);
  // A task left out by `only` takes everything that needs it along: running them without it
  // would break the promise that needs are met.
  const leftOut = withDependents(missed, graph);
  const kept = plans.filter((plan) => !leftOut.has(plan.key));

  const namesOf = new Map(
    kept.map((plan) => [plan.key, (plan.expansions ?? []).map((e) => e.name)]),
  );
  const position = new Map([...namesOf.values()].flat().map((name, i) => [name, i]));
  const defaults = file.defaults ?? {};
  const defaultEnv = envEntries(defaults.env, root, ['defaults', 'env']);
  const tasks: CompiledTask[] = [];
  for (const plan of kept) {
    const task = definitions.get(plan.key);
    if (!task) continue;
    const env = Object.fromEntries([
      ...defaultEnv,
      ...envEntries(task.env, root, ['tasks', plan.key, 'env']),
    ]);
    const needs = plan.needs
      .flatMap((need) => namesOf.get(need) ?? [])
      .sort((a, b) => (position.get(a) ?? 0) - (position.get(b) ?? 0));
    for (const expansion of plan.expansions ?? []) {
      tasks.push({
        name: expansion.name,
        baseName: plan.key,
        // fromEntries defines own properties, so even odd keys cannot reach a prototype.
        matrix: Object.fromEntries(expansion.matrix),
        image: task.image ?? defaults.image ?? null,
        script: [...task.script],
        env: { ...env },
        labels: [...new Set(task.labels ?? defaults.labels ?? [])].sort(),
        needs: [...needs],
        secrets: [...new Set(task.secrets ?? [])],
        outputs: [...(task.outputs ?? [])],
        allowFailure: task.allow_failure ?? false,
        maxAttempts: (task.retries ?? defaults.retries ?? DEFAULT_RETRIES) + 1,
        timeoutS: task.timeout ?? defaults.timeout ?? DEFAULT_TIMEOUT_S,
        position: tasks.length,
      });
    }
  }
  return { name: file.name ?? null, tasks };
}

// Env values stringified as written (`3.10` stays `3.10`), keys in file order.
function envEntries(
  env: Record<string, string | number | boolean> | undefined,
  root: Loc,
  path: string[],
): Array<[string, string]> {
  if (!env) return [];
  const loc = locAt(root, path);
  const keys = loc?.entries ? [...loc.entries.keys()] : Object.keys(env);
  return keys.flatMap((key): Array<[string, string]> => {
    const value = Object.hasOwn(env, key) ? env[key] : undefined;
    if (value === undefined) return [];
    return [[key, asWritten(value, loc?.entries?.get(key) ?? null)]];
  });
}
