import { findCycles } from './graph.ts';
import type { IssueList, PathSegment } from './issues.ts';
import { MAX_OUTPUTS, MAX_TASK_NAME_CHARS, MAX_TASKS } from './limits.ts';
import { quote, type Suggester } from './messages.ts';
import {
  cartesian,
  envFragment,
  matrixTaskName,
  TASK_NAME_PATTERN,
  VAR_NAME_PATTERN,
} from './names.ts';
import { MatrixSchema } from './schema.ts';
import { asWritten, isPlainMap, type Loc, type Plain } from './source.ts';

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
  axes: Array<[string, string[]]> | null;
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
    const draft: Draft = { key, loc, task, needs: [], needIndex: new Map(), axes: null };
    readNeeds(draft, known, keys, issues, suggester);
    draft.axes = readMatrix(draft, issues);
    drafts.push(draft);
  }
  reportCycles(drafts, issues);

  let total = 0;
  for (const draft of drafts) {
    let count = 1;
    for (const [, values] of draft.axes ?? []) count *= values.length;
    total += count;
  }
  if (total > MAX_TASKS) {
    const count = Number.isSafeInteger(total) ? `${total} tasks` : 'too many tasks';
    issues.add(
      tasksLoc.offset,
      ['tasks'],
      `the pipeline expands to ${count}; at most ${MAX_TASKS} tasks per job are allowed`,
    );
    return null;
  }

  const plans = drafts.map((draft) => ({
    key: draft.key,
    needs: draft.needs,
    expansions: draft.axes && expand(draft, issues),
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

// The matrix axes with values stringified as written, or null when there is no usable matrix
// (no matrix at all gives one expansion with no axes: []).
function readMatrix(draft: Draft, issues: IssueList): Array<[string, string[]]> | null {
  const matrix = isPlainMap(draft.task) ? draft.task.matrix : undefined;
  if (matrix === undefined) return [];
  const matrixLoc = draft.loc.entries?.get('matrix');
  if (!isPlainMap(matrix) || !matrixLoc?.entries || !MatrixSchema.safeParse(matrix).success) {
    return null;
  }
  const path: PathSegment[] = ['tasks', draft.key, 'matrix'];
  if (matrixLoc.entries.size === 0) {
    issues.add(matrixLoc.offset, path, 'must have at least one key');
    return null;
  }
  let usable = true;
  const byFragment = new Map<string, string>();
  const axes: Array<[string, string[]]> = [];
  for (const [key, loc] of matrixLoc.entries) {
    // The runner passes each value as CONDUCTOR_MATRIX_<KEY>.
    const fragment = envFragment(key);
    const earlier = byFragment.get(fragment);
    if (fragment === '') {
      issues.add(loc.keyOffset, [...path, key], `matrix key ${quote(key)} needs a letter or digit`);
      usable = false;
    } else if (earlier !== undefined) {
      issues.add(
        loc.keyOffset,
        [...path, key],
        `matrix keys ${quote(earlier)} and ${quote(key)} would both be passed on as CONDUCTOR_MATRIX_${fragment}`,
      );
      usable = false;
    } else {
      byFragment.set(fragment, key);
    }
    const raw = matrix[key];
    const values = (Array.isArray(raw) ? raw : []).map((value, i) =>
      asWritten(value, loc.items?.[i] ?? null),
    );
    const seen = new Set<string>();
    values.forEach((value, i) => {
      if (seen.has(value)) {
        const offset = loc.items?.[i]?.offset ?? loc.offset;
        issues.add(
          offset,
          [...path, key, i],
          `duplicate matrix value ${quote(value)}: the same task would run twice`,
        );
        usable = false;
      }
      seen.add(value);
    });
    axes.push([key, values]);
  }
  if (!usable) return null;
  // The longest name any expansion gets: every axis at its longest value.
  const longest = matrixTaskName(
    draft.key,
    axes.map(([key, values]): [string, string] => [
      key,
      values.reduce((a, b) => (b.length > a.length ? b : a), ''),
    ]),
  );
  if (longest.length > MAX_TASK_NAME_CHARS) {
    issues.add(
      matrixLoc.offset,
      path,
      `expands to task names of up to ${longest.length} characters, such as ${quote(longest)}; at most ${MAX_TASK_NAME_CHARS} characters per task name are allowed`,
    );
    return null;
  }
  return axes;
}

function expand(draft: Draft, issues: IssueList): Expansion[] | null {
  if (draft.axes === null) return null;
  if (draft.axes.length === 0) return [{ name: draft.key, matrix: [] }];
  const expansions = cartesian(draft.axes).map((matrix) => ({
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
