// The shell script a task's `script` lines become. Every line runs in the
// same shell, so `cd` and variables carry over from one line to the next.
import { shellQuote } from './env.ts';

export interface WrapperOptions {
  /** A file of exports to source first, then delete (the docker executor's environment). */
  envFile?: string;
  /** Where the script records the number of the line it was running when it exited. */
  lineFile: string;
}

/**
 * Builds the script: each line is echoed as `+ line`, then run with `eval`,
 * under `set -e` and `pipefail` as most CI systems do, and the first line
 * that fails ends the script with that line's exit status. `eval` confines a
 * syntax error to its own line. Written for POSIX sh too, for images without
 * bash.
 */
export function wrapperScript(lines: string[], opts: WrapperOptions): string {
  const out = [
    '# written by conductor-runner',
    // One stream, in the order things happened.
    'exec 2>&1',
  ];
  if (opts.envFile) {
    out.push(`. ${shellQuote(opts.envFile)}`, `rm -f ${shellQuote(opts.envFile)}`);
  }
  out.push(
    '__conductor_line=0',
    `__conductor_exit() { printf '%s\\n' "$__conductor_line" > ${shellQuote(opts.lineFile)}; }`,
    'trap __conductor_exit EXIT',
    'set -e',
    // dash has no pipefail; busybox sh and bash do.
    'set -o pipefail 2>/dev/null || true',
  );
  lines.forEach((line, i) => {
    const echo = line
      .split('\n')
      .map((l) => `+ ${l}`)
      .join('\n');
    out.push(
      `__conductor_line=${i + 1}`,
      `printf '%s\\n' ${shellQuote(echo)}`,
      `eval ${shellQuote(line)}`,
      // Catches a failure that `set +e` in an earlier line let through.
      '__conductor_status=$?; [ "$__conductor_status" -eq 0 ] || exit "$__conductor_status"',
    );
  });
  out.push('__conductor_line=0', '');
  return out.join('\n');
}
