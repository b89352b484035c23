// The shell script a task's `script` lines become. Every line runs in the
// same shell, so `cd` and variables carry over from one line to the next.
//
// One numbering: a task's script is numbered as written in the pipeline, an
// entry of three lines (a YAML block) taking lines 3 to 5, say. The runner's
// error names that number, and so does the shell in what it prints
// (`script.sh: line 4: make: command not found`). bash numbers a line inside
// `eval` from the physical line the `eval` is on, plus the line inside the
// evaluated text; dash numbers it from the text alone. So the whole wrapper is
// one physical line, and each entry's text is evaluated behind as many
// newlines as there are script lines before it: both shells then count the
// script's own lines.
import { shellQuote } from './env.ts';

/**
 * The status the script exits with when it cannot read its environment file
 * (EX_CONFIG): the executor tells it from the script's own by the line file,
 * which nothing has written yet.
 */
export const ENV_FAILED_STATUS = 78;

export interface WrapperOptions {
  /** A file of exports to source first, then delete (the docker executor's environment). */
  envFile?: string;
  /** Where the script records the entry it was running when it exited, and the line that failed. */
  lineFile: string;
  /**
   * The directory the script's lines run in, changed into first. The shell
   * executor starts the shell beside the wrapper, so that the shell names it
   * `script.sh` in its messages rather than by its temporary path.
   */
  cwd?: string;
}

/** The first and last line of a script entry, numbered as the script is written. */
export interface EntryLines {
  first: number;
  last: number;
}

/** The lines of one entry as written: a YAML block's closing newline ends its last line, it adds none. */
function entryLines(entry: string): string[] {
  return entry.replace(/\n$/, '').split('\n');
}

/** Where each entry of a script starts and ends, counting lines as written. */
export function scriptLines(entries: readonly string[]): EntryLines[] {
  let next = 1;
  return entries.map((entry) => {
    const first = next;
    next += entryLines(entry).length;
    return { first, last: next - 1 };
  });
}

/** `text` as one shell word with no newline in it: its newlines come from `$__conductor_nl`. */
function oneLineWord(text: string): string {
  return text
    .split('\n')
    .map((part) => (part === '' ? "''" : shellQuote(part)))
    .join('"$__conductor_nl"');
}

/**
 * Builds the script: each entry is echoed as `+ line`, then run with `eval`,
 * under `set -e` and `pipefail` as most CI systems do, and the first entry
 * that fails ends the script with its exit status. `eval` confines a syntax
 * error to its own entry. Written for POSIX sh too, for images without bash.
 * The line file gets `ENTRY LINE`: the entry (1-based) the script was in when
 * it exited (0 once it is past the last), and, under bash, the first line of
 * that entry whose command failed (an ERR trap; empty when none did).
 */
export function wrapperScript(entries: string[], opts: WrapperOptions): string {
  const out = [
    // One stream, in the order things happened.
    'exec 2>&1',
  ];
  if (opts.envFile) {
    // Without it the script would run without CI, CONDUCTOR_* and its secrets
    // (bash goes on past a `.` that fails): it does not run at all.
    const file = shellQuote(opts.envFile);
    out.push(
      `if [ ! -r ${file} ]; then echo "[conductor] the task's environment "${file}" cannot be read by the container's user (uid $(id -u 2>/dev/null || echo unknown)): the script does not run without it"; exit ${ENV_FAILED_STATUS}; fi`,
      `. ${file}`,
      `rm -f ${file}`,
    );
  }
  if (opts.cwd) {
    // OLDPWD would point `cd -` at the runner's own directory.
    out.push(`cd -- ${shellQuote(opts.cwd)} || exit 1`, 'unset OLDPWD');
  }
  out.push(
    '__conductor_line=0',
    '__conductor_from=0',
    '__conductor_err=',
    "__conductor_nl=$(printf '\\nx')",
    // biome-ignore lint/suspicious/noTemplateCurlyInString: a shell expansion
    '__conductor_nl=${__conductor_nl%x}',
    `__conductor_exit() { printf '%s %s\\n' "$__conductor_line" "$__conductor_err" > ${shellQuote(opts.lineFile)}; }`,
    'trap __conductor_exit EXIT',
    // Under `set -e`, the first command of the entry that fails ends the
    // script: its line is the one to name. `eval` itself fails after it (on
    // line 1, before the entry's text unless it is the first entry). Under
    // `set +e` a failure may not be what ended the entry, so none is named;
    // and dash has no ERR trap.
    `if [ -n "\${BASH_VERSION:-}" ]; then trap 'case $- in *e*) [ -n "$__conductor_err" ] || [ "$LINENO" -lt "$__conductor_from" ] || __conductor_err=$LINENO ;; esac' ERR; fi`,
    'set -e',
    // dash (before 0.5.13) has no pipefail; busybox sh and bash do. Tried in a
    // subshell first: `set` is a special built-in, and a bad option to one
    // ends a POSIX shell whatever `|| true` follows.
    'if (set -o pipefail) 2>/dev/null; then set -o pipefail; fi',
  );
  const spans = scriptLines(entries);
  entries.forEach((entry, i) => {
    const lines = entryLines(entry);
    const { first } = spans[i]!;
    out.push(
      `__conductor_line=${i + 1}`,
      `__conductor_from=${first}`,
      '__conductor_err=',
      `printf '%s\\n' ${lines.map((l) => shellQuote(`+ ${l}`)).join(' ')}`,
      `eval ${oneLineWord('\n'.repeat(first - 1) + entry)}`,
      // Catches a failure that `set +e` in an earlier entry let through.
      '__conductor_status=$?',
      '[ "$__conductor_status" -eq 0 ] || exit "$__conductor_status"',
    );
  });
  out.push('__conductor_line=0');
  return [
    out.join('; '),
    '# written by conductor-runner: one physical line, so that the shell numbers the',
    "# script's lines as the pipeline writes them (see runner/script.ts)",
    '',
  ].join('\n');
}

/** What the line file says: the entry the script ended in (0: none) and the line that failed, if known. */
export function parseLineFile(text: string): { entry: number; line: number | undefined } {
  const [entry, line] = text.trim().split(/\s+/);
  const n = Number.parseInt(entry ?? '', 10);
  const l = Number.parseInt(line ?? '', 10);
  return { entry: Number.isNaN(n) ? 0 : n, line: Number.isNaN(l) ? undefined : l };
}
