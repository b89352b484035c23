/** Task names: what may appear as a key under `tasks:`. */
export const TASK_NAME_PATTERN = /^[A-Za-z0-9][A-Za-z0-9_.-]{0,99}$/;

/** Names of environment variables, secrets and outputs. */
export const VAR_NAME_PATTERN = /^[A-Za-z_][A-Za-z0-9_]*$/;

/** Keys of a task's matrix. */
export const MATRIX_KEY_PATTERN = /^[A-Za-z_][A-Za-z0-9_-]*$/;

/**
 * Mangles a name into the part of an environment variable name the runner builds from it
 * (`CONDUCTOR_NEEDS_<TASK>_<OUTPUT>`, `CONDUCTOR_MATRIX_<KEY>`): upper-case, every run of other
 * characters than A-Z and 0-9 becomes one `_`, and `_` is trimmed from both ends.
 */
export function envFragment(name: string): string {
  return name
    .toUpperCase()
    .replace(/[^A-Z0-9]+/g, '_')
    .replace(/^_|_$/g, '');
}

/** Names one expansion of a matrix task: `test (node: 20, os: linux)`, keys in file order. */
export function matrixTaskName(baseName: string, matrix: ReadonlyArray<[string, string]>): string {
  return `${baseName} (${matrix.map(([key, value]) => `${key}: ${value}`).join(', ')})`;
}

/** Every combination of the axes' values, the first axis varying slowest (nested loops in file order). */
export function cartesian(
  axes: ReadonlyArray<[string, readonly string[]]>,
): Array<Array<[string, string]>> {
  let combos: Array<Array<[string, string]>> = [[]];
  for (const [key, values] of axes) {
    const next: Array<Array<[string, string]>> = [];
    for (const combo of combos) {
      for (const value of values) next.push([...combo, [key, value]]);
    }
    combos = next;
  }
  return combos;
}
