// Every bound the compiler enforces, in one place; docs/limits.md lists them for users. Each
// exists because a hostile pipeline file (a fork's pull request can bring one) must not make the
// control plane chew, store or hand out more than it can afford.

/** The file a pipeline lives in, at the root of the repository. */
export const PIPELINE_FILE = '.conductor.yml';

const MiB = 1024 * 1024;

/** Larger files are refused before parsing, so a hostile push cannot make the compiler chew on megabytes. */
export const MAX_PIPELINE_BYTES = MiB;

/** The most tasks one job may hold after matrix expansion, counted before `only` filtering. */
export const MAX_TASKS = 500;

/**
 * The most tasks one matrix task may expand to, after exclude and include; its axes' values may
 * not make more combinations either (exclude is no way around it), as GitHub's limit per matrix.
 */
export const MAX_MATRIX_EXPANSIONS = 256;

/**
 * The most entries a matrix's `include` or `exclude` may list, and the most keys a matrix may
 * have with those its includes add. An include entry that adds a key is merged into every
 * combination, so without these a file of 1 MiB of one-key entries costs seconds and gigabytes
 * before any size check can see the names it makes.
 */
export const MAX_MATRIX_ENTRIES = 256;
export const MAX_MATRIX_KEYS = 32;

/** How deep `include:` may nest: the pipeline file includes files that include files, and no further. */
export const MAX_INCLUDE_DEPTH = 3;

/** The most files `include:` may read for one compile, each at most MAX_PIPELINE_BYTES. */
export const MAX_INCLUDED_FILES = 20;

/**
 * How many rounds of reading included files a compile may take. Each round
 * reads at least one file the compile did not have, but the files a round
 * asks for depend on what the earlier rounds brought (a file reached by a
 * shorter path frees the budget a deeper one used), so the rounds are bounded
 * by the files, not by the depth. Past it the job fails naming `include`,
 * never with an internal error.
 */
export const MAX_INCLUDE_ROUNDS = MAX_INCLUDED_FILES + 1;

/** The issue a compile answers when its includes did not settle within MAX_INCLUDE_ROUNDS. */
export function unsettledIncludes(asked: readonly string[]): {
  line: number;
  column: number;
  path: string;
  message: string;
} {
  return {
    line: 1,
    column: 1,
    path: 'include',
    message: `the included files did not settle after ${MAX_INCLUDE_ROUNDS} rounds of reading (still asking for ${asked.join(', ')}); include fewer files, or each file from one place`,
  };
}

/** The longest path `include:` may name. */
export const MAX_INCLUDE_PATH_CHARS = 256;

/** How deep `extends` may chain: a task extends a hidden task that extends another, and so on. */
export const MAX_EXTENDS_DEPTH = 10;

/**
 * The most map entries `extends` may copy while merging, in all: a hidden task with a big env
 * extended by thousands of hidden tasks would otherwise copy it thousands of times.
 */
export const MAX_EXTENDED_VALUES = 100_000;

/** The most outputs one task may promise; each expansion of each producer is a variable to check. */
export const MAX_OUTPUTS = 100;

/**
 * The most secrets one task may list. A claim answers their values (each at most 64 KiB, see
 * lib/app/projects.ts), so 32 of them stay within 2 MiB of the 6 MB a Lambda answer may carry.
 */
export const MAX_SECRETS = 32;

/**
 * The most values aliases may copy in all. Nested aliases expand exponentially ("billion
 * laughs"); yaml's own maxAliasCount only guards its toJS, which the compiler never calls.
 */
export const MAX_ALIASED_VALUES = 10_000;

/**
 * The most text aliases may copy in all, in UTF-8 bytes: one anchor of 100 KB repeated 200,000
 * times is a short file but 20 GB of text to check, store and hand out.
 */
export const MAX_ALIASED_BYTES = 4 * MiB;

/** The longest compiled task name: a task key (at most 100 characters) and its matrix values. */
export const MAX_TASK_NAME_CHARS = 256;

/**
 * The most one compiled task may weigh: its strings (name, image, script, env, matrix, labels,
 * needs, secret and output names) as JSON, as a claim hands them out. With at most 1 MiB of
 * inherited outputs and 2 MiB of secret values, a claim answer stays well under Lambda's 6 MB.
 */
export const MAX_TASK_BYTES = MiB;

/** The most all compiled tasks of one job may weigh, counted as each task is expanded. */
export const MAX_JOB_BYTES = 10 * MiB;

/** The most problems one compile reports; the rest are counted in a last line. */
export const MAX_REPORTED_ISSUES = 100;

/** The most "did you mean" suggestions one compile computes; later problems get none. */
export const MAX_SUGGESTIONS = 20;

/** The most candidates one suggestion compares a word against. */
export const MAX_SUGGESTION_CANDIDATES = 1000;

/** Words and candidates longer than this get no suggestion: names are at most 100 characters. */
export const MAX_SUGGESTED_CHARS = 128;

/** Local stack: a compile still running after this long is stopped, and its job fails. */
export const COMPILE_TIME_LIMIT_MS = 10_000;

/** Local stack: the heap a compile's worker thread may use before it is stopped. */
export const COMPILE_MEMORY_MB = 256;

/** `1048576 bytes (1 MiB)`: a byte count as messages state it. */
export function describeBytes(bytes: number): string {
  return bytes % MiB === 0 ? `${bytes} bytes (${bytes / MiB} MiB)` : `${bytes} bytes`;
}
