// Hidden tasks and `extends`, as GitLab has them: a task key starting with "." is a hidden task,
// never run; `extends: [.a, .b]` merges .a, then .b, then the task's own keys over them. Maps
// merge key by key (deeply), anything else (lists included) is replaced whole.
import type { IssueList, PathSegment } from './issues.ts';
import { MAX_EXTENDED_VALUES, MAX_EXTENDS_DEPTH } from './limits.ts';
import { quote, type Suggester } from './messages.ts';
import { isPlainMap, type Loc, type Plain, type PlainMap } from './source.ts';

/** Names of hidden tasks: a "." and then what a task name may be. */
export const HIDDEN_TASK_PATTERN = /^\.[A-Za-z0-9][A-Za-z0-9_.-]{0,99}$/;

/** One key under `tasks:`, from whichever file defines it. */
export interface TaskEntry {
  name: string;
  value: Plain;
  loc: Loc;
}

/** Tasks with their `extends` resolved. */
export interface Resolved {
  /** The tasks that run, in order, with what they inherited merged in. */
  tasks: TaskEntry[];
  /** The hidden tasks, resolved the same way, to be checked on their own. */
  hidden: TaskEntry[];
  /**
   * Locations of inherited values. A problem in an inherited value is reported once, where the
   * value is written: at the hidden task that holds it, not again at every task extending it.
   */
  inherited: Set<Loc>;
}

type Node = [Plain, Loc];

/** True for the name of a hidden task. */
export function isHidden(name: string): boolean {
  return name.startsWith('.');
}

/**
 * Resolves `extends` on every task, hidden or not, reporting a missing or visible parent, a
 * cycle, a chain deeper than MAX_EXTENDS_DEPTH, and merges copying more than
 * MAX_EXTENDED_VALUES entries in all, each at the name in `extends` that caused it.
 */
export function resolveExtends(
  entries: readonly TaskEntry[],
  issues: IssueList,
  suggester: Suggester,
): Resolved {
  const hiddenByName = new Map<string, TaskEntry>();
  for (const entry of entries) {
    if (!isHidden(entry.name)) continue;
    if (!HIDDEN_TASK_PATTERN.test(entry.name)) {
      issues.add(
        entry.loc.keyOffset,
        ['tasks', entry.name],
        `invalid hidden task name ${quote(entry.name)}: use "." and then a letter or digit, then letters, digits, ".", "_" or "-", at most 100 characters`,
      );
    }
    hiddenByName.set(entry.name, entry);
  }
  const inherited = new Set<Loc>();
  const done = new Map<string, Node>();
  let copied = 0;
  let exhausted = false;

  // Marks a value taken whole from a parent (a fresh Loc, so the parent's own stays its own).
  const inherit = (loc: Loc): Loc => {
    const marked = { ...loc };
    inherited.add(marked);
    return marked;
  };

  const merge = (base: Node, over: Node, at: { offset: number; path: PathSegment[] }): Node => {
    const [baseValue, baseLoc] = base;
    const [overValue, overLoc] = over;
    if (!isPlainMap(baseValue) || !isPlainMap(overValue) || !baseLoc.entries || !overLoc.entries) {
      return over;
    }
    // Entries of an inherited map are inherited too, one level at a time as merges reach them.
    const baseInherited = inherited.has(baseLoc);
    const overInherited = inherited.has(overLoc);
    const value: PlainMap = Object.create(null);
    const entries = new Map<string, Loc>();
    for (const [key, loc] of baseLoc.entries) {
      const item = baseValue[key];
      if (item === undefined) continue;
      value[key] = item;
      entries.set(key, baseInherited ? inherit(loc) : loc);
    }
    for (const [key, loc] of overLoc.entries) {
      const item = overValue[key];
      if (item === undefined) continue;
      const under = entries.get(key);
      const [merged, mergedLoc] =
        under === undefined
          ? [item, overInherited ? inherit(loc) : loc]
          : merge([value[key] ?? null, under], [item, loc], at);
      value[key] = merged;
      entries.set(key, mergedLoc);
    }
    copied += entries.size;
    if (copied > MAX_EXTENDED_VALUES && !exhausted) {
      exhausted = true;
      issues.add(at.offset, at.path, `extends copies more than ${MAX_EXTENDED_VALUES} values`);
    }
    const mergedLoc = { ...overLoc, entries };
    if (baseInherited && overInherited) inherited.add(mergedLoc);
    return [value, mergedLoc];
  };

  const resolve = (entry: TaskEntry, chain: string[]): Node => {
    const cached = done.get(entry.name);
    if (cached && isHidden(entry.name)) return cached;
    const own: Node = [entry.value, entry.loc];
    const task = entry.value;
    const names = isPlainMap(task) ? task.extends : undefined;
    const extendsLoc = entry.loc.entries?.get('extends');
    if (!isPlainMap(task) || names === undefined || !extendsLoc || exhausted) return own;
    // The shape of `extends` is the schema's to report.
    const list = typeof names === 'string' ? [names] : Array.isArray(names) ? names : [];
    let result: Node | null = null;
    list.forEach((name, i) => {
      if (typeof name !== 'string') return;
      const loc = typeof names === 'string' ? extendsLoc : (extendsLoc.items?.[i] ?? extendsLoc);
      const path: PathSegment[] = ['tasks', entry.name, 'extends'];
      if (typeof names !== 'string') path.push(i);
      const parent = hiddenByName.get(name);
      if (!parent) {
        const hint = suggester.suggest(name, hiddenByName.keys());
        const visible = entries.some((other) => other.name === name);
        issues.add(
          loc.offset,
          path,
          visible
            ? `${quote(name)} is a task that runs; extends takes hidden tasks only (names starting with ".")${hint}`
            : `unknown hidden task ${quote(name)}${hint}`,
        );
        return;
      }
      if (chain.includes(name)) {
        const cycle = [...chain.slice(chain.indexOf(name)), name];
        issues.add(loc.offset, path, `extends cycle: ${cycle.join(' → ')}`);
        return;
      }
      if (chain.length > MAX_EXTENDS_DEPTH) {
        issues.add(
          loc.offset,
          path,
          `extends chains more than ${MAX_EXTENDS_DEPTH} deep: ${[...chain, name].join(' → ')}`,
        );
        return;
      }
      const [parentValue, parentLoc] = resolve(parent, [...chain, name]);
      if (!isPlainMap(parentValue) || !parentLoc.entries) return;
      // What the parent itself extends is resolved into it already; its own `extends` is not
      // passed on, and everything it passes on is marked as inherited.
      const passed: PlainMap = Object.create(null);
      const passedEntries = new Map<string, Loc>();
      for (const [key, keyLoc] of parentLoc.entries) {
        const value = parentValue[key];
        if (key === 'extends' || value === undefined) continue;
        passed[key] = value;
        passedEntries.set(key, inherit(keyLoc));
      }
      const node: Node = [passed, { ...parentLoc, entries: passedEntries }];
      result = result === null ? node : merge(result, node, { offset: loc.offset, path });
    });
    const resolved: Node =
      result === null
        ? own
        : merge(result, own, { offset: extendsLoc.offset, path: ['tasks', entry.name, 'extends'] });
    if (isHidden(entry.name)) done.set(entry.name, resolved);
    return resolved;
  };

  const tasks: TaskEntry[] = [];
  const hidden: TaskEntry[] = [];
  for (const entry of entries) {
    const start = isHidden(entry.name) ? [entry.name] : [];
    const [value, loc] = resolve(entry, start);
    (isHidden(entry.name) ? hidden : tasks).push({ name: entry.name, value, loc });
  }
  return { tasks, hidden, inherited };
}

/** Whether a path ends in, or passes through, a value the task inherited. */
export function isInherited(root: Loc, path: readonly PathSegment[], inherited: Set<Loc>): boolean {
  let loc: Loc | null = root;
  for (const segment of path) {
    loc =
      typeof segment === 'number'
        ? (loc?.items?.[segment] ?? null)
        : (loc?.entries?.get(segment) ?? null);
    if (loc === null) return false;
    if (inherited.has(loc)) return true;
  }
  return false;
}
