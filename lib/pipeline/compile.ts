import type { TaskRunWhen } from '../states.ts';
import type { CompiledChanges } from './changes.ts';
import { type CompiledConcurrency, compileConcurrency } from './concurrency.ts';
import { isInherited, resolveExtends, type TaskEntry } from './extends.ts';
import type { Trigger } from './glob.ts';
import { refMatches } from './glob.ts';
import { withDependents } from './graph.ts';
import { type IncludedFiles, type ReadFile, readIncludes } from './include.ts';
import { applyInputs, type CompiledInput, compileDeclarations, resolveInputs } from './inputs.ts';
import { IssueList, type PathSegment, PipelineError } from './issues.ts';
import { describeBytes, MAX_JOB_BYTES, MAX_PIPELINE_BYTES, MAX_TASK_BYTES } from './limits.ts';
import { quote, Suggester, type SuggestionCost } from './messages.ts';
import { type Expansion, planTasks, type TaskPlan } from './plan.ts';
import {
  checkPipelineFile,
  checkWith,
  DEFAULT_ARTIFACT_EXPIRY_S,
  DEFAULT_BLOCK_TIMEOUT_S,
  DEFAULT_QUEUE_TIMEOUT_S,
  DEFAULT_RETRIES,
  DEFAULT_SERVICE_HEALTH_TIMEOUT_S,
  DEFAULT_TIMEOUT_S,
  HiddenTaskSchema,
  IncludedFileSchema,
  type PipelineFile,
  type SchemaProblem,
  type Task,
} from './schema.ts';
import {
  AliasBudget,
  asWritten,
  isPlainMap,
  type Loc,
  locAt,
  locate,
  type Plain,
  type PlainMap,
  readSource,
  type Source,
} from './source.ts';
import { runWhenOf, whenMatches } from './when.ts';

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
  /**
   * Containers the docker executor starts beside the script, in file order; [] for none.
   * Optional so that tasks copied from before services existed need not say.
   */
  services?: CompiledService[];
  /**
   * Its artifacts and caches (docs/artifacts.md); {} for none. Optional so
   * that tasks copied from before artifacts existed need not say.
   */
  storage?: CompiledStorage;
  /** A block step (no script, no runner): what it asks for. Optional: tasks from before it need not say. */
  block?: CompiledBlock | null;
  /** The changed-path filter; null or absent: the task runs whatever changed. */
  changes?: CompiledChanges | null;
  /** The concurrency group the task claims a slot of; null or absent: none. */
  concurrency?: CompiledConcurrency | null;
  /** `when:`'s status: which outcomes of its needs let it run; absent is on_success. */
  when?: TaskRunWhen;
  maxAttempts: number;
  timeoutS: number;
  /** How long the task may wait in the queue before it fails for want of a worker. */
  queueTimeoutS: number;
  /** 0-based order in the job: file order, matrix expansions in cartesian order. */
  position: number;
}

/** A block step as stored: what the page asks, and what happens when nobody answers. */
export interface CompiledBlock {
  prompt: string;
  fields: CompiledBlockField[];
  timeoutS: number;
  onTimeout: 'fail' | 'skip';
}

/** One field of a block step; `options` only for a select. */
export interface CompiledBlockField {
  name: string;
  type: 'text' | 'select';
  required: boolean;
  options: string[] | null;
}

/** A task's `artifacts:` and `cache:`, as stored with it and handed to the runner. */
export interface CompiledStorage {
  artifacts?: { paths: string[]; expireInS: number; when: 'on_success' | 'on_failure' | 'always' };
  caches?: Array<{
    /** As written: `{{ hash 'file' }}` is filled in by the runner, from the checkout. */
    key: string;
    restoreKeys: string[];
    paths: string[];
    policy: 'pull' | 'push' | 'pull-push';
  }>;
  /** Test reports uploaded after the script, whatever its outcome (docs/pipeline.md). */
  reports?: { junit: string[] };
}

/** A service container of a task, as the runner receives it. */
export interface CompiledService {
  /** Its host name on the task's network. */
  name: string;
  image: string;
  /** Values as written, keys in file order. */
  env: Record<string, string>;
  ports: number[];
  /** Run in the service's container until it succeeds; null: the service counts as up once started. */
  health: string | null;
  healthTimeoutS: number;
  /** Replaces the image's CMD; absent keeps it. */
  command?: string[];
  /** Replaces the image's ENTRYPOINT; absent keeps it. */
  entrypoint?: string[];
}

/** What a pipeline file compiles to for one trigger. */
export interface CompiledPipeline {
  name: string | null;
  tasks: CompiledTask[];
  /** The inputs `inputs:` declares, in file order (the Run form's fields). */
  inputs?: CompiledInput[];
  /** The whole job's concurrency group (top-level `concurrency:`); absent for none. */
  concurrency?: CompiledConcurrency;
}

/** Compiling stopped short: these files, named under `include:`, are to be read and handed in. */
export interface FilesToRead {
  toRead: string[];
}

/** What compiling gives: the pipeline, or the included files it still needs. */
export type CompileResult = CompiledPipeline | FilesToRead;

/** True when a compile still needs included files read. */
export function needsFiles(result: CompileResult): result is FilesToRead {
  return 'toRead' in result;
}

/** A compiler of pipeline files: compilePipeline itself, or one that runs it elsewhere (lib/pipeline/worker.ts). */
export type PipelineCompiler = (
  text: string,
  trigger: Trigger,
  files?: IncludedFiles,
) => CompileResult | Promise<CompileResult>;

/**
 * Compiles the text of a pipeline file for a trigger, with the included files read so far;
 * throws PipelineError, and only that. When the file includes files not among `files`, answers
 * their paths instead (FilesToRead): read them at the same commit and compile again with them.
 * `cost`, when given, is told what the compile spent on suggestions (tests, measurements).
 */
export function compilePipeline(
  text: string,
  trigger: Trigger,
  files: IncludedFiles = new Map(),
  cost?: SuggestionCost,
): CompileResult {
  const suggester = new Suggester();
  try {
    return compile(text, trigger, files, suggester);
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

function compile(
  text: string,
  trigger: Trigger,
  files: IncludedFiles,
  suggester: Suggester,
): CompileResult {
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
  const issues = new IssueList();
  const budget = new AliasBudget();
  const source = readSource(text, { issues, budget });
  if (!source.ok) throw issues.toError();
  if (source.empty) {
    issues.add(0, [], 'the file is empty; it needs at least version and tasks');
    throw issues.toError();
  }
  const included = readIncludes(source, files, issues, budget);
  // Every file is read before anything is reported, so one compile reports the problems of all.
  if (included.toRead.length > 0) return { toRead: included.toRead };
  // Broken YAML in an included file: as in the pipeline file, nothing past it can be trusted.
  if (issues.size > 0 && included.broken) throw issues.toError();
  const merged = mergeFiles(source, included.files, issues, suggester);
  const { file, problems } = checkPipelineFile(merged.value, suggester);
  report(problems, merged.loc, merged.inherited, issues);
  const plans = planTasks(merged.value, merged.loc, issues, suggester);
  if (issues.size > 0 || file === null || plans === null) {
    if (issues.size === 0) issues.add(0, [], 'the pipeline could not be compiled');
    throw issues.toError();
  }
  const pipeline = build(file, plans, merged.loc, trigger, issues);
  if (pipeline === null) throw issues.toError();
  withInputsAndWhen(pipeline, file, trigger, merged.loc, issues);
  checkOrgGroups(file, trigger, merged.loc, issues);
  if (issues.size > 0) throw issues.toError();
  return pipeline;
}

// The job's inputs checked and applied to every task (lib/pipeline/inputs.ts),
// each task's `when:` status, and the declarations for the Run form.
function withInputsAndWhen(
  pipeline: CompiledPipeline,
  file: PipelineFile,
  trigger: Trigger,
  root: Loc,
  issues: IssueList,
): void {
  const values = resolveInputs(file.inputs, trigger, root, issues);
  applyInputs(pipeline.tasks, file.inputs, values, root, issues);
  // Set only where they say something, so that a pipeline without them
  // compiles to what it did before.
  for (const task of pipeline.tasks) {
    const when = runWhenOf(file.tasks[task.baseName]?.when);
    if (when !== 'on_success') task.when = when;
  }
  if (file.inputs) pipeline.inputs = compileDeclarations(file.inputs);
}

// An `org:` group spans projects: a pipeline may name one only when its
// project is in it (the project's `org_groups`, which an admin sets), so a
// writer of one project cannot join, cancel or starve another's jobs by
// naming its group (issue #46).
function checkOrgGroups(file: PipelineFile, trigger: Trigger, root: Loc, issues: IssueList): void {
  const allowed = trigger.orgGroups;
  if (!allowed) return;
  const check = (group: string | undefined, path: PathSegment[]) => {
    if (!group?.startsWith('org:') || allowed.includes(group.slice(4))) return;
    const list = allowed.length > 0 ? allowed.join(', ') : 'none';
    issues.add(
      locate(root, path, 'value'),
      path,
      `the project is not in the concurrency group ${group} (its org_groups: ${list}); an admin adds it to the project's org_groups`,
    );
  };
  // Every task, those `only:` leaves out on this ref too: the file is wrong on every branch.
  for (const [name, task] of Object.entries(file.tasks)) {
    check(compileConcurrency(task.concurrency, trigger)?.group, [
      'tasks',
      name,
      'concurrency',
      'group',
    ]);
  }
  check(compileConcurrency(file.concurrency, trigger)?.group, ['concurrency', 'group']);
}

// Schema problems at their locations, leaving out those in inherited values: each is reported
// once, at the hidden task where the value is written.
function report(
  problems: readonly SchemaProblem[],
  root: Loc,
  inherited: Set<Loc>,
  issues: IssueList,
): void {
  for (const problem of problems) {
    if (isInherited(root, problem.at, inherited)) continue;
    issues.add(locate(root, problem.at, problem.target), problem.path, problem.message);
  }
}

/**
 * The pipeline as one document: the pipeline file with the tasks of every included file added
 * to its own (a name defined twice is an error naming both places), `extends` resolved, and
 * hidden tasks checked on their own and left out.
 */
function mergeFiles(
  main: Source,
  included: readonly ReadFile[],
  issues: IssueList,
  suggester: Suggester,
): { value: Plain; loc: Loc; inherited: Set<Loc> } {
  const entries: TaskEntry[] = [];
  const definedAt = new Map<string, number>();
  const add = (tasks: Plain, loc: Loc | undefined) => {
    if (!isPlainMap(tasks) || !loc?.entries) return;
    for (const [name, taskLoc] of loc.entries) {
      const earlier = definedAt.get(name);
      if (earlier !== undefined) {
        issues.add(
          taskLoc.keyOffset,
          ['tasks', name],
          `task ${quote(name)} is defined twice: here and at ${issues.where(earlier)}`,
        );
        continue;
      }
      definedAt.set(name, taskLoc.keyOffset);
      entries.push({ name, value: tasks[name] ?? null, loc: taskLoc });
    }
  };
  const root = main.value;
  const rootLoc = main.loc;
  const tasksLoc = rootLoc.entries?.get('tasks');
  if (isPlainMap(root)) add(root.tasks ?? null, tasksLoc);
  for (const file of included) {
    const { problems } = checkWith(IncludedFileSchema, file.source.value, [], suggester);
    for (const problem of problems) {
      issues.add(
        locate(file.source.loc, problem.at, problem.target),
        problem.path,
        problem.message,
      );
    }
    const value = file.source.value;
    if (isPlainMap(value)) add(value.tasks ?? null, file.source.loc.entries?.get('tasks'));
  }
  const usable =
    isPlainMap(root) && rootLoc.entries && (root.tasks === undefined || tasksLoc?.entries);
  if (!usable) return { value: root, loc: rootLoc, inherited: new Set() };

  const resolved = resolveExtends(entries, issues, suggester);
  for (const hidden of resolved.hidden) {
    const prefix = ['tasks', hidden.name];
    const { problems } = checkWith(HiddenTaskSchema, hidden.value, prefix, suggester);
    report(
      problems.map((problem) => ({ ...problem, at: problem.at.slice(prefix.length) })),
      hidden.loc,
      resolved.inherited,
      issues,
    );
  }
  if (resolved.tasks.length === 0 && resolved.hidden.length === 0 && root.tasks === undefined) {
    return { value: root, loc: rootLoc, inherited: resolved.inherited };
  }
  const tasks: PlainMap = Object.create(null);
  const taskLocs = new Map<string, Loc>();
  for (const task of resolved.tasks) {
    tasks[task.name] = task.value;
    taskLocs.set(task.name, task.loc);
  }
  const value: PlainMap = Object.create(null);
  Object.assign(value, root, { tasks });
  const entriesLoc = new Map(rootLoc.entries);
  entriesLoc.set('tasks', {
    ...(tasksLoc ?? { ...rootLoc, items: null }),
    entries: taskLocs,
  });
  return { value, loc: { ...rootLoc, entries: entriesLoc }, inherited: resolved.inherited };
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
      const definition = definitions.get(plan.key);
      const only = definition?.only;
      return (
        (only !== undefined && !only.some((pattern) => refMatches(pattern, trigger))) ||
        !whenMatches(definition?.when, trigger)
      );
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
    const block = compileBlock(task.block);
    // A block step's fields are its outputs: its dependents read them as any task's.
    const outputs = block ? block.fields.map((field) => field.name) : (task.outputs ?? []);
    const script = task.script ?? [];
    const scriptBytes =
      listBytes(script) + (block ? Buffer.byteLength(JSON.stringify(block), 'utf8') : 0);
    const services = compileServices(task.services, root, ['tasks', plan.key, 'services']);
    const storage = compileStorage(task);
    const otherBytes =
      (services.length ? Buffer.byteLength(JSON.stringify(services), 'utf8') : 0) +
      (Object.keys(storage).length ? Buffer.byteLength(JSON.stringify(storage), 'utf8') : 0) +
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
        script: [...script],
        env: { ...env },
        labels: [...labels],
        needs: [...needs],
        secrets: [...secrets],
        outputs: [...outputs],
        allowFailure: task.allow_failure ?? false,
        failFast: task.fail_fast ?? false,
        services: services.map((service) => ({ ...service, env: { ...service.env } })),
        ...(Object.keys(storage).length ? { storage: structuredClone(storage) } : {}),
        block,
        changes: task.changes
          ? { include: [...task.changes.include], exclude: [...task.changes.exclude] }
          : null,
        concurrency: compileConcurrency(task.concurrency, trigger),
        maxAttempts: (task.retries ?? defaults.retries ?? DEFAULT_RETRIES) + 1,
        timeoutS: task.timeout ?? defaults.timeout ?? DEFAULT_TIMEOUT_S,
        queueTimeoutS: task.queue_timeout ?? defaults.queue_timeout ?? DEFAULT_QUEUE_TIMEOUT_S,
        position: tasks.length,
      });
    }
  }
  const concurrency = compileConcurrency(file.concurrency, trigger);
  return { name: file.name ?? null, tasks, ...(concurrency ? { concurrency } : {}) };
}

// The part of a task's weight that differs between expansions: its name and matrix values.
function expansionBytes(expansion: Expansion): number {
  let bytes = jsonBytes(expansion.name);
  for (const [key, value] of expansion.matrix) bytes += jsonBytes(key) + jsonBytes(value);
  return bytes;
}

function compileBlock(block: Task['block']): CompiledBlock | null {
  if (!block) return null;
  return {
    prompt: block.prompt,
    fields: (block.fields ?? []).map((field) => ({
      name: field.name,
      type: field.type ?? 'text',
      required: field.required ?? false,
      options: field.options ? [...field.options] : null,
    })),
    timeoutS: block.timeout ?? DEFAULT_BLOCK_TIMEOUT_S,
    onTimeout: block.on_timeout ?? 'fail',
  };
}

// A task's artifacts and caches with their defaults filled in.
function compileStorage(task: Task): CompiledStorage {
  const storage: CompiledStorage = {};
  if (task.artifacts) {
    storage.artifacts = {
      paths: [...task.artifacts.paths],
      expireInS: task.artifacts.expire_in ?? DEFAULT_ARTIFACT_EXPIRY_S,
      when: task.artifacts.when ?? 'on_success',
    };
  }
  if (task.cache) {
    storage.caches = task.cache.map((cache) => ({
      key: cache.key,
      restoreKeys: [...(cache.restore_keys ?? [])],
      paths: [...cache.paths],
      policy: cache.policy ?? 'pull-push',
    }));
  }
  if (task.reports) storage.reports = { junit: [...task.reports.junit] };
  return storage;
}

// Env values stringified as written (`3.10` stays `3.10`), keys in file order.
function compileServices(services: Task['services'], root: Loc, path: string[]): CompiledService[] {
  if (!services) return [];
  const loc = locAt(root, path);
  const names = loc?.entries ? [...loc.entries.keys()] : Object.keys(services);
  return names.flatMap((name): CompiledService[] => {
    const service = Object.hasOwn(services, name) ? services[name] : undefined;
    if (!service) return [];
    return [
      {
        name,
        image: service.image,
        env: Object.fromEntries(envEntries(service.env, root, [...path, name, 'env'])),
        ports: [...(service.ports ?? [])],
        health: service.health ?? null,
        healthTimeoutS: service.health_timeout ?? DEFAULT_SERVICE_HEALTH_TIMEOUT_S,
        ...(service.command ? { command: [...service.command] } : {}),
        ...(service.entrypoint ? { entrypoint: [...service.entrypoint] } : {}),
      },
    ];
  });
}

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
