// A task's matrix: its axes, and the combinations exclude removes and include extends or adds,
// with GitHub's semantics (exclude first, then include). Read leniently like the rest of the
// task graph's checks: the schema has already reported a matrix of the wrong shape.
import type { IssueList, PathSegment } from './issues.ts';
import {
  MAX_MATRIX_ENTRIES,
  MAX_MATRIX_EXPANSIONS,
  MAX_MATRIX_KEYS,
  MAX_TASK_NAME_CHARS,
} from './limits.ts';
import { quote, type Suggester } from './messages.ts';
import { cartesian, envFragment, matrixTaskName } from './names.ts';
import { MATRIX_RESERVED_KEYS, MatrixSchema } from './schema.ts';
import { asWritten, isPlainMap, type Loc, type Plain, type PlainMap } from './source.ts';

// A matrix value goes into the task's name, which pages, logs and `npm run ctl` print: a
// control character there (an escape sequence, a line break) could fake or hide what a
// terminal shows.
const ONE_LINE = 'must be one line without control characters';
const oneLine = (value: string) => !/\p{Cc}/u.test(value);

/** One combination of matrix values, keys in the matrix's key order. */
export type Combination = Array<[string, string]>;

/** A matrix that passed its checks, ready to be combined. */
export interface MatrixSpec {
  loc: Loc;
  path: PathSegment[];
  axes: Array<[string, string[]]>;
  /** Each exclude entry as key → value, every key an axis. */
  excludes: Array<Map<string, string>>;
  /** Each include entry as key → value, with where it is written. */
  includes: Array<{ values: Map<string, string>; loc: Loc }>;
  /** Every key in the order names show them: the axes as written, then keys only includes add. */
  keys: string[];
}

/** The number of combinations of the axes, before exclude and include; Infinity past safe integers. */
export function axisProduct(axes: ReadonlyArray<[string, readonly string[]]>): number {
  let count = axes.length === 0 ? 0 : 1;
  for (const [, values] of axes) count *= values.length;
  return Number.isSafeInteger(count) ? count : Number.POSITIVE_INFINITY;
}

/**
 * Checks a task's matrix: axis keys that clash as environment names, repeated values, exclude
 * entries that name a key or value the axes lack, and more axis combinations than one task may
 * expand to. Answers null when there is no usable matrix (the problems are reported).
 */
export function readMatrix(
  matrix: Plain,
  loc: Loc,
  path: PathSegment[],
  issues: IssueList,
  suggester: Suggester,
): MatrixSpec | null {
  if (!isPlainMap(matrix) || !loc.entries || !MatrixSchema.safeParse(matrix).success) return null;
  if (loc.entries.size === 0) {
    issues.add(loc.offset, path, 'must have at least one key');
    return null;
  }
  let usable = true;
  for (const list of ['include', 'exclude'] as const) {
    const listLoc = loc.entries.get(list);
    if ((listLoc?.items?.length ?? 0) > MAX_MATRIX_ENTRIES) {
      issues.add(
        listLoc!.offset,
        [...path, list],
        `lists ${listLoc!.items!.length} entries; at most ${MAX_MATRIX_ENTRIES} are allowed`,
      );
      return null;
    }
  }
  const axes: Array<[string, string[]]> = [];
  for (const [key, keyLoc] of loc.entries) {
    if (MATRIX_RESERVED_KEYS.includes(key)) continue;
    const raw = matrix[key];
    const values = (Array.isArray(raw) ? raw : []).map((value, i) =>
      asWritten(value, keyLoc.items?.[i] ?? null),
    );
    values.forEach((value, i) => {
      if (!oneLine(value)) {
        issues.add(keyLoc.items?.[i]?.offset ?? keyLoc.offset, [...path, key, i], ONE_LINE);
        usable = false;
      }
    });
    const seen = new Set<string>();
    values.forEach((value, i) => {
      if (seen.has(value)) {
        const offset = keyLoc.items?.[i]?.offset ?? keyLoc.offset;
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
  const includeLocs = loc.entries.get('include')?.items ?? [];
  if (axes.length === 0 && includeLocs.length === 0) {
    issues.add(
      loc.offset,
      path,
      'must have at least one key with a list of values, or an include entry',
    );
    return null;
  }
  const axisValues = new Map(axes.map(([key, values]) => [key, new Set(values)]));
  const keys = axes.map(([key]) => key);
  const product = axisProduct(axes);
  if (product > MAX_MATRIX_EXPANSIONS) {
    const count = Number.isFinite(product) ? `${product} combinations` : 'too many combinations';
    issues.add(
      loc.offset,
      path,
      `its values make ${count}; at most ${MAX_MATRIX_EXPANSIONS} per task are allowed`,
    );
    usable = false;
  }

  const excludes: Array<Map<string, string>> = [];
  const excludeLocs = loc.entries.get('exclude')?.items ?? [];
  (matrix.exclude as PlainMap[] | undefined)?.forEach((entry, i) => {
    const entryLoc = excludeLocs[i];
    const values = new Map<string, string>();
    for (const [key, valueLoc] of entryLoc?.entries ?? []) {
      const at = [...path, 'exclude', i, key];
      const value = asWritten(entry[key] ?? null, valueLoc);
      const known = axisValues.get(key);
      // Exclude comes before include, so it can only name what the axes hold: a key or value
      // it misspells would otherwise exclude nothing, silently.
      if (!known) {
        const hint = suggester.suggest(key, keys);
        issues.add(valueLoc.keyOffset, at, `${quote(key)} is not a key of this matrix${hint}`);
        usable = false;
      } else if (!known.has(value)) {
        const hint = suggester.suggest(value, known);
        issues.add(valueLoc.offset, at, `${quote(value)} is not a value of ${quote(key)}${hint}`);
        usable = false;
      }
      values.set(key, value);
    }
    excludes.push(values);
  });

  const includes: Array<{ values: Map<string, string>; loc: Loc }> = [];
  let tooManyKeys = false;
  (matrix.include as PlainMap[] | undefined)?.forEach((entry, i) => {
    const entryLoc = includeLocs[i];
    if (!entryLoc?.entries || tooManyKeys) return;
    const values = new Map<string, string>();
    for (const [key, valueLoc] of entryLoc.entries) {
      const value = asWritten(entry[key] ?? null, valueLoc);
      if (!oneLine(value)) {
        issues.add(valueLoc.offset, [...path, 'include', i, key], ONE_LINE);
        usable = false;
      }
      values.set(key, value);
      if (!keys.includes(key)) {
        if (keys.length >= MAX_MATRIX_KEYS) {
          issues.add(
            valueLoc.keyOffset,
            [...path, 'include', i, key],
            `adds a key past ${MAX_MATRIX_KEYS}; at most ${MAX_MATRIX_KEYS} matrix keys are allowed`,
          );
          tooManyKeys = true;
          usable = false;
          return;
        }
        keys.push(key);
      }
    }
    includes.push({ values, loc: entryLoc });
  });

  // The runner passes each value as CONDUCTOR_MATRIX_<KEY>, so keys must stay apart once mangled.
  const fragments = new Map<string, string>();
  for (const key of keys) {
    const fragment = envFragment(key);
    const earlier = fragments.get(fragment);
    const at = keyLocation(loc, key);
    if (fragment === '') {
      issues.add(
        at.offset,
        [...path, ...at.path, key],
        `matrix key ${quote(key)} needs a letter or digit`,
      );
      usable = false;
    } else if (earlier !== undefined) {
      issues.add(
        at.offset,
        [...path, ...at.path, key],
        `matrix keys ${quote(earlier)} and ${quote(key)} would both be passed on as CONDUCTOR_MATRIX_${fragment}`,
      );
      usable = false;
    } else {
      fragments.set(fragment, key);
    }
  }
  return usable ? { loc, path, axes, excludes, includes, keys } : null;
}

// Where a key is first written in a matrix: as an axis, or in the first include entry naming it.
function keyLocation(loc: Loc, key: string): { offset: number; path: PathSegment[] } {
  const axis = loc.entries?.get(key);
  if (axis && !MATRIX_RESERVED_KEYS.includes(key)) return { offset: axis.keyOffset, path: [] };
  const items = loc.entries?.get('include')?.items ?? [];
  for (const [i, item] of items.entries()) {
    const entry = item.entries?.get(key);
    if (entry) return { offset: entry.keyOffset, path: ['include', i] };
  }
  return { offset: loc.offset, path: [] };
}

/**
 * The combinations of a checked matrix, as GitHub makes them: the axes' cartesian product (the
 * first axis varying slowest), less every combination an exclude entry matches on all the keys
 * it names; then each include entry, in order, adds its keys to every remaining combination
 * whose axis values it matches (keys an earlier include added may be overwritten, axis values
 * never), or, matching none, is added as a combination of its own. Answers null, with the
 * problem reported, past MAX_MATRIX_EXPANSIONS combinations, when nothing is left to run, or
 * when an include adds the same combination twice.
 */
export function combine(spec: MatrixSpec, issues: IssueList): Combination[] | null {
  const axisKeys = new Set(spec.axes.map(([key]) => key));
  const original: Array<Map<string, string>> = (spec.axes.length === 0 ? [] : cartesian(spec.axes))
    .map((pairs) => new Map(pairs))
    .filter(
      (combo) =>
        !spec.excludes.some((exclude) =>
          [...exclude].every(([key, value]) => combo.get(key) === value),
        ),
    );
  const added: Array<Map<string, string>> = [];
  const addedNames = new Set<string>();
  for (const [i, include] of spec.includes.entries()) {
    let matched = false;
    for (const combo of original) {
      const fits = [...include.values].every(
        ([key, value]) => !axisKeys.has(key) || combo.get(key) === value,
      );
      if (!fits) continue;
      matched = true;
      for (const [key, value] of include.values) if (!axisKeys.has(key)) combo.set(key, value);
    }
    if (matched) continue;
    const combo = new Map(include.values);
    const name = matrixTaskName('', ordered(combo, spec.keys));
    if (addedNames.has(name)) {
      issues.add(
        include.loc.offset,
        [...spec.path, 'include', i],
        `adds the combination ${name.trim()} a second time`,
      );
      return null;
    }
    addedNames.add(name);
    added.push(combo);
    if (original.length + added.length > MAX_MATRIX_EXPANSIONS) {
      issues.add(
        include.loc.offset,
        [...spec.path, 'include', i],
        `takes the matrix past ${MAX_MATRIX_EXPANSIONS} combinations; at most ${MAX_MATRIX_EXPANSIONS} per task are allowed`,
      );
      return null;
    }
  }
  const combos = [...original, ...added].map((combo) => ordered(combo, spec.keys));
  if (combos.length === 0) {
    issues.add(spec.loc.offset, spec.path, 'exclude leaves no combination to run');
    return null;
  }
  return combos;
}

function ordered(combo: ReadonlyMap<string, string>, keys: readonly string[]): Combination {
  return keys.flatMap((key): Combination => {
    const value = combo.get(key);
    return value === undefined ? [] : [[key, value]];
  });
}

/** Checks that no expansion's name passes MAX_TASK_NAME_CHARS; reports the longest if one does. */
export function checkNameLengths(
  baseName: string,
  combos: readonly Combination[],
  spec: MatrixSpec,
  issues: IssueList,
): boolean {
  let longest = '';
  for (const combo of combos) {
    const name = matrixTaskName(baseName, combo);
    if (name.length > longest.length) longest = name;
  }
  if (longest.length <= MAX_TASK_NAME_CHARS) return true;
  issues.add(
    spec.loc.offset,
    spec.path,
    `expands to task names of up to ${longest.length} characters, such as ${quote(longest)}; at most ${MAX_TASK_NAME_CHARS} characters per task name are allowed`,
  );
  return false;
}
