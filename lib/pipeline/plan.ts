import { findCycles } from './graph.ts';
import type { IssueList } from './issues.ts';
import { MAX_OUTPUTS, MAX_TASKS } from './limits.ts';
import {
  axisProduct,
  type Combination,
  checkNameLengths,
  combine,
  type MatrixSpec,
  readMatrix,
} from './matrix.ts';
import { quote, type Suggester } from './messages.ts';
import { envFragment, matrixTaskName, TASK_NAME_PATTERN, VAR_NAME_PATTERN } from './names.ts';
import { isPlainMap, type Loc, type Plain } from './source.ts';

/** One compiled task before defaults are applied: its name and matrix values. */
export interface Expansion {
  name: string;
  matrix: Array<[string, string]>;
}

/** What the graph checks learnt about one task under `tasks:`. */
export interface TaskPlan {
  key: string;
  /** Tasks it needs, known and distinct, in the order written. */
  needs: string[];
  /** Its compiled names, in cartesian order; null when its matrix is unusable. */
  expansions: Expansion[] | null;
}

interface Draft {
  key: string;
  loc: Loc;
  task: Plain;
  needs: string[];
  needIndex: Map<string, number>;
  /** The matrix, 'none' for a task without one, null for one that cannot be used. */
  matrix: MatrixSpec | 'none' | null;
}

const MAX_CLASHES = 100;

const TASK_NAME_RULE =
  'a letter or digit, then letters, digits, ".", "_" or "-", at most 100 characters';

/**
 * Checks what the schema cannot see, on the whole file before any `only` filtering: task names,
 * needs, cycles, matrix expansion, the task limits and environment-name clashes. Reads the
 * converted YAML leniently, so it still runs when some task has a schema problem; returns null
 * when `tasks` is not a usable map (the schema reports that). The limits on tasks and on their
 * names are checked from the matrix axes, before a single expansion is made.
 */
export function planTasks(
  root: Plain,
  rootLoc: Loc,
  issues: IssueList,
  suggester: Suggester,
): TaskPlan[] | null {
  const tasks = isPlainMap(root) ? root.tasks : undefined;
  const tasksLoc = rootLoc.entries?.get('tasks');
  if (!isPlainMap(tasks) || !tasksLoc?.entries) return null;
  if (tasksLoc.entries.size === 0) {
    issues.add(tasksLoc.offset, ['tasks'], 'must define at least one task');
    return null;
  }
  const keys = [...tasksLoc.entries.keys()];
  const known = new Set(keys);
  const drafts: Draft[] = [];
  for (const [key, loc] of tasksLoc.entries) {
    if (!TASK_NAME_PATTERN.test(key)) {
      issues.add(
        loc.keyOffset,
        ['tasks', key],
        `invalid task name ${quote(key)}: use ${TASK_NAME_RULE}`,
      );
    }
    const task = tasks[key] ?? null;
    const draft: Draft = { key, loc, task, needs: [], needIndex: new Map(), matrix: null };
    readNeeds(draft, known, keys, issues, suggester);
    const matrix = isPlainMap(task) ? task.matrix : undefined;
    const matrixLoc = loc.entries?.get('matrix');
    draft.matrix =
      matrix === undefined
        ? 'none'
        : matrixLoc
          ? readMatrix(matrix, matrixLoc, ['tasks', key, 'matrix'], issues, suggester)
          : null;
    drafts.push(draft);
  }
  reportCycles(drafts, issues);

  // Combinations are made only while the job stays within MAX_TASKS: a file of thousands of
  // tasks extending one 256-way matrix must not make millions of them to find out.
  let total = 0;
  let exact = true;
  const combos = drafts.map((draft): Combination[] | null => {
    const spec = draft.matrix;
    if (spec === 'none') {
      total += 1;
      return [[]];
    }
    if (spec === null) return null;
    if (total > MAX_TASKS) {
      total += axisProduct(spec.axes) + spec.includes.length;
      if (spec.excludes.length > 0 || spec.includes.length > 0) exact = false;
      return null;
    }
    const made = combine(spec, issues);
    total += made?.length ?? 0;
    return made;
  });
  if (total > MAX_TASKS) {
    const count =
      exact && Number.isSafeInteger(total) ? `${total} tasks` : `more than ${MAX_TASKS} tasks`;
    issues.add(
      tasksLoc.offset,
      ['tasks'],
      `the pipeline expands to ${count}; at most ${MAX_TASKS} tasks per job are allowed`,
    );
    return null;
  }

  const plans = drafts.map((draft, i) => ({
    key: draft.key,
    needs: draft.needs,
    expansions: expand(draft, combos[i] ?? null, issues),
  }));
  // Clashing task names clash in every output too; reporting those again would be noise.
  if (checkNames(drafts, plans, issues)) checkNeededOutputs(drafts, plans, issues);
  return plans;
}

function readNeeds(
  draft: Draft,
  known: ReadonlySet<string>,
  keys: string[],
  issues: IssueList,
  suggester: Suggester,
): void {
  const needs = isPlainMap(draft.task) ? draft.task.needs : undefined;
  if (!Array.isArray(needs)) return;
  const itemLocs = draft.loc.entries?.get('needs')?.items;
  needs.forEach((need, index) => {
    if (typeof need !== 'string') return;
    const offset = itemLocs?.[index]?.offset ?? draft.loc.offset;
    const path = ['tasks', draft.key, 'needs', index];
    if (need === draft.key) {
      issues.add(offset, path, 'a task cannot need itself');
    } else if (!known.has(need)) {
      const hint = suggester.suggest(need, others(keys, draft.key));
      issues.add(offset, path, `unknown task ${quote(need)}${hint}`);
    } else if (!draft.needIndex.has(need)) {
      draft.needIndex.set(need, index);
      draft.needs.push(need);
    }
  });
}

// Lazily, since a suggestion only looks at the first candidates of a huge file.
function* others(keys: readonly string[], self: string): Generator<string> {
  for (const key of keys) if (key !== self) yield key;
}

function expand(draft: Draft, combos: Combination[] | null, issues: IssueList): Expansion[] | null {
  if (combos === null) return null;
  if (draft.matrix === 'none' || draft.matrix === null) return [{ name: draft.key, matrix: [] }];
  if (!checkNameLengths(draft.key, combos, draft.matrix, issues)) return null;
  const expansions = combos.map((matrix) => ({
    name: matrixTaskName(draft.key, matrix),
    matrix,
  }));
  // Distinct values give distinct names unless a value itself looks like `a, key: b`.
  const names = new Set<string>();
  for (const { name } of expansions) {
    if (names.has(name)) {
      issues.add(
        draft.loc.offset,
        ['tasks', draft.key, 'matrix'],
        `duplicate task name ${quote(name)}`,
      );
      return null;
    }
    names.add(name);
  }
  return expansions;
}

// Task names reach the runner as CONDUCTOR_NEEDS_<TASK>_..., so two that mangle alike clash.
function checkNames(drafts: Draft[], plans: TaskPlan[], issues: IssueList): boolean {
  const byFragment = new Map<string, string>();
  let clean = true;
  plans.forEach((plan, i) => {
    const draft = drafts[i];
    if (!draft) return;
    for (const { name } of plan.expansions ?? []) {
      const fragment = envFragment(name);
      const earlier = byFragment.get(fragment);
      if (earlier === undefined) {
        byFragment.set(fragment, name);
        continue;
      }
      issues.add(
        draft.loc.keyOffset,
        ['tasks', draft.key],
        `task names ${quote(earlier)} and ${quote(name)} would both be passed on as ${fragment} in environment variable names`,
      );
      clean = false;
      return;
    }
  });
  return clean;
}

// A task that needs both `a` (output `b_c`) and `a_b` (output `c`) would get two values for
// CONDUCTOR_NEEDS_A_B_C; neither name check alone can see that. Clashing producer pairs are found
// once for the whole file, then each task is checked against the pairs it needs.
function checkNeededOutputs(drafts: Draft[], plans: TaskPlan[], issues: IssueList): void {
  const holders = new Map<string, Array<{ producer: string; what: string }>>();
  plans.forEach((plan, i) => {
    const outputs = outputsOf(drafts[i]?.task ?? null);
    for (const { name } of plan.expansions ?? []) {
      for (const output of outputs) {
        const variable = `CONDUCTOR_NEEDS_${envFragment(name)}_${envFragment(output)}`;
        const what = `output ${quote(output)} of ${quote(name)}`;
        const list = holders.get(variable) ?? [];
        list.push({ producer: plan.key, what });
        holders.set(variable, list);
      }
    }
  });
  const clashes: Array<{ a: string; b: string; message: string }> = [];
  for (const [variable, list] of holders) {
    // Many names mangling alike are already errors of their own; a sample of clashes will do.
    if (clashes.length >= MAX_CLASHES) break;
    for (const [i, first] of list.entries()) {
      for (const second of list.slice(i + 1, i + 1 + MAX_CLASHES)) {
        // Clashes within one task's own outputs are the schema's to report.
        if (first.producer === second.producer) continue;
        const message = `${first.what} and ${second.what} would both be passed on as ${variable}`;
        clashes.push({ a: first.producer, b: second.producer, message });
      }
    }
  }
  for (const draft of drafts) {
    const clash = clashes.find(({ a, b }) => draft.needIndex.has(a) && draft.needIndex.has(b));
    if (!clash) continue;
    const offset = draft.loc.entries?.get('needs')?.offset ?? draft.loc.offset;
    issues.add(offset, ['tasks', draft.key, 'needs'], clash.message);
  }
}

function outputsOf(task: Plain): string[] {
  const outputs = isPlainMap(task) ? task.outputs : undefined;
  if (!Array.isArray(outputs)) return [];
  const valid = outputs.filter(
    (output): output is string => typeof output === 'string' && VAR_NAME_PATTERN.test(output),
  );
  return [...new Set(valid)].slice(0, MAX_OUTPUTS);
}

function reportCycles(drafts: Draft[], issues: IssueList): void {
  const byKey = new Map(drafts.map((draft) => [draft.key, draft]));
  const graph = new Map(drafts.map((draft) => [draft.key, draft.needs]));
  for (const cycle of findCycles([...byKey.keys()], graph)) {
    const [first, second] = cycle;
    const draft = byKey.get(first ?? '');
    if (!draft || second === undefined) continue;
    const index = draft.needIndex.get(second) ?? 0;
    const offset = draft.loc.entries?.get('needs')?.items?.[index]?.offset ?? draft.loc.offset;
    issues.add(offset, ['tasks', draft.key, 'needs', index], `cycle: ${describeCycle(cycle)}`);
  }
}

// A cycle through hundreds of tasks is named by its ends, so the message stays readable.
function describeCycle(cycle: string[]): string {
  if (cycle.length <= 12) return cycle.join(' → ');
  const shown = [...cycle.slice(0, 8), '…', ...cycle.slice(-3)].join(' → ');
  return `${shown} (${cycle.length - 1} tasks)`;
}
