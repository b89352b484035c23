import type { Trigger } from './glob.ts';
import { refMatches } from './glob.ts';
import { withDependents } from './graph.ts';
import { type IssueList, PipelineError } from './issues.ts';
import { describeBytes, MAX_JOB_BYTES, MAX_PIPELINE_BYTES, MAX_TASK_BYTES } from './limits.ts';
import { quote, Suggester, type SuggestionCost } from './messages.ts';
import { type Expansion, planTasks, type TaskPlan } from './plan.ts';
import {
  checkPipelineFile,
  DEFAULT_QUEUE_TIMEOUT_S,
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
  /**
   * A failed expansion of this matrix task cancels its siblings (fail_fast). Always set by the
   * compiler; optional so that tasks copied from before it existed need not say.
   */
  failFast?: boolean;
  maxAttempts: number;
  timeoutS: number;
  /** How long the task may wait in the queue before it fails for want of a worker. */
  queueTimeoutS: number;
  /** 0-based order in the job: file order, matrix expansions in cartesian order. */
  position: number;
}

/** What a pipeline file compiles to for one trigger. */
export interface CompiledPipeline {
  name: string | null;
  tasks: CompiledTask[];
}

/** A compiler of pipeline files: compilePipeline itself, or one that runs it elsewhere (lib/pipeline/worker.ts). */
export type PipelineCompiler = (
  text: string,
  trigger: Trigger,
) => CompiledPipeline | Promise<CompiledPipeline>;

/**
 * Compiles the text of a pipeline file for a trigger; throws PipelineError, and only that.
 * `cost`, when given, is told what the compile spent on suggestions (tests, measurements).
 */
export function compilePipeline(
  text: string,
  trigger: Trigger,
  cost?: SuggestionCost,
): CompiledPipeline {
  const suggester = new Suggester();
  try {
    return compile(text, trigger, suggester);
  } catch (error) {
    if (error instanceof PipelineError) throw error;
    // Callers rely on seeing nothing but PipelineError; a bug here must fail the job, not the worker.
    const message = error instanceof Error ? error.message : 'unknown error';
    throw new PipelineError(
      [{ line: 1, column: 1, path: '', message: `internal compiler error: ${message}` }],
      { cause: error },
    );
  } finally {
    if (cost) {
      cost.suggestions = suggester.suggestions;
      cost.cells = suggester.cells;
    }
  }
}

function compile(text: string, trigger: Trigger, suggester: Suggester): CompiledPipeline {
  if (typeof text !== 'string') {
    throw new PipelineError([
      { line: 1, column: 1, path: '', message: 'the pipeline file must be text' },
    ]);
  }
  // Checked before parsing: the limit exists to keep the parser away from huge input.
  const bytes = Buffer.byteLength(text, 'utf8');
  if (bytes > MAX_PIPELINE_BYTES) {
    const message = `the file is ${bytes} bytes; at most ${describeBytes(MAX_PIPELINE_BYTES)} are allowed`;
    throw new PipelineError([{ line: 1, column: 1, path: '', message }]);
  }
  const source = readSource(text);
  const { issues } = source;
  if (!source.ok) throw issues.toError();
  if (source.empty) {
    issues.add(0, [], 'the file is empty; it needs at least version and tasks');
    throw issues.toError();
  }
  const { file, problems } = checkPipelineFile(source.value, suggester);
  for (const problem of problems) {
    issues.add(locate(source.loc, problem.at, problem.target), problem.path, problem.message);
  }
  const plans = planTasks(source.value, source.loc, issues, suggester);
  if (issues.size > 0 || file === null || plans === null) {
    if (issues.size === 0) issues.add(0, [], 'the pipeline could not be compiled');
    throw issues.toError();
  }
  const pipeline = build(file, plans, source.loc, trigger, issues);
  if (pipeline === null) throw issues.toError();
  return pipeline;
}

// Sizes are counted as a claim hands the strings out: JSON-quoted and escaped, in UTF-8 bytes.
// Control characters grow sixfold when escaped, so counting raw bytes would undercount.
function jsonBytes(text: string): number {
  return Buffer.byteLength(JSON.stringify(text), 'utf8');
}

function listBytes(items: readonly string[]): number {
  let total = 0;
  for (const item of items) total += jsonBytes(item);
  return total;
}

/** The env of a task as [name, value, bytes], in order; bytes of a name and its value together. */
type SizedEnv = Array<[string, string, number]>;

function sizeEnv(entries: Array<[string, string]>): SizedEnv {
  return entries.map(([key, value]) => [key, value, jsonBytes(key) + jsonBytes(value)]);
}

/**
 * Builds the tasks of the job, weighing each expansion before it is made: a task over
 * MAX_TASK_BYTES, or the task that takes the job over MAX_JOB_BYTES, stops the build with an
 * issue at that task, so a hostile file never gets to build (or store) hundreds of megabytes.
 * Tasks that `only` leaves out are weighed too, so the limits hold on every branch alike.
 */
function build(
  file: PipelineFile,
  plans: TaskPlan[],
  root: Loc,
  trigger: Trigger,
  issues: IssueList,
): CompiledPipeline | null {
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

  const namesOf = new Map(
    plans
      .filter((plan) => !leftOut.has(plan.key))
      .map((plan) => [plan.key, (plan.expansions ?? []).map((e) => e.name)]),
  );
  const position = new Map([...namesOf.values()].flat().map((name, i) => [name, i]));
  // What needing a task costs: the names of all its expansions, kept or not.
  const needBytes = new Map(
    plans.map((plan) => [plan.key, listBytes((plan.expansions ?? []).map((e) => e.name))]),
  );
  const defaults = file.defaults ?? {};
  const defaultEnv = sizeEnv(envEntries(defaults.env, root, ['defaults', 'env']));
  const defaultEnvBytes = defaultEnv.reduce((sum, [, , bytes]) => sum + bytes, 0);
  const defaultEnvByKey = new Map(defaultEnv.map(([key, , bytes]) => [key, bytes]));
  const tasks: CompiledTask[] = [];
  let jobBytes = 0;
  for (const plan of plans) {
    const task = definitions.get(plan.key);
    if (!task) continue;
    const taskEnv = sizeEnv(envEntries(task.env, root, ['tasks', plan.key, 'env']));
    // defaults.env merged under the task's own: weighed without building the merged map.
    let envBytes = defaultEnvBytes;
    for (const [key, , bytes] of taskEnv) envBytes += bytes - (defaultEnvByKey.get(key) ?? 0);
    const image = task.image ?? defaults.image ?? null;
    const labels = [...new Set(task.labels ?? defaults.labels ?? [])].sort();
    const secrets = [...new Set(task.secrets ?? [])];
    const outputs = task.outputs ?? [];
    const scriptBytes = listBytes(task.script);
    const otherBytes =
      jsonBytes(plan.key) +
      (image === null ? 0 : jsonBytes(image)) +
      listBytes(labels) +
      listBytes(secrets) +
      listBytes(outputs) +
      plan.needs.reduce((sum, need) => sum + (needBytes.get(need) ?? 0), 0);
    const kept = !leftOut.has(plan.key);
    const at = locAt(root, ['tasks', plan.key])?.keyOffset ?? 0;
    let env: Record<string, string> | null = null;
    let needs: string[] | null = null;
    for (const expansion of plan.expansions ?? []) {
      const bytes = scriptBytes + envBytes + otherBytes + expansionBytes(expansion);
      if (bytes > MAX_TASK_BYTES) {
        const parts = `script ${scriptBytes}, env ${envBytes}, the rest ${bytes - scriptBytes - envBytes}`;
        issues.add(
          at,
          ['tasks', plan.key],
          `task ${quote(expansion.name)} compiles to ${bytes} bytes (${parts}); at most ${describeBytes(MAX_TASK_BYTES)} per task are allowed`,
        );
        return null;
      }
      jobBytes += bytes;
      if (jobBytes > MAX_JOB_BYTES) {
        issues.add(
          at,
          ['tasks', plan.key],
          `the job's tasks reach ${jobBytes} bytes with task ${quote(expansion.name)}; at most ${describeBytes(MAX_JOB_BYTES)} of tasks per job are allowed`,
        );
        return null;
      }
      if (!kept) continue;
      // Merged and resolved once per task, after the first expansion was weighed.
      env ??= Object.fromEntries([...defaultEnv, ...taskEnv].map(([key, value]) => [key, value]));
      needs ??= plan.needs
        .flatMap((need) => namesOf.get(need) ?? [])
        .sort((a, b) => (position.get(a) ?? 0) - (position.get(b) ?? 0));
      tasks.push({
        name: expansion.name,
        baseName: plan.key,
        // fromEntries defines own properties, so even odd keys cannot reach a prototype.
        matrix: Object.fromEntries(expansion.matrix),
        image,
        script: [...task.script],
        env: { ...env },
        labels: [...labels],
        needs: [...needs],
        secrets: [...secrets],
        outputs: [...outputs],
        allowFailure: task.allow_failure ?? false,
        failFast: task.fail_fast ?? false,
        maxAttempts: (task.retries ?? defaults.retries ?? DEFAULT_RETRIES) + 1,
        timeoutS: task.timeout ?? defaults.timeout ?? DEFAULT_TIMEOUT_S,
        queueTimeoutS: task.queue_timeout ?? defaults.queue_timeout ?? DEFAULT_QUEUE_TIMEOUT_S,
        position: tasks.length,
      });
    }
  }
  return { name: file.name ?? null, tasks };
}

// The part of a task's weight that differs between expansions: its name and matrix values.
function expansionBytes(expansion: Expansion): number {
  let bytes = jsonBytes(expansion.name);
  for (const [key, value] of expansion.matrix) bytes += jsonBytes(key) + jsonBytes(value);
  return bytes;
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
