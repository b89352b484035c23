// The bounds on test reports (docs/limits.md): everything a report's
// author (a pipeline, a test, a fork's pull request) controls is bounded,
// so reading one costs a bounded time and leaves bounded rows.

/** Largest report file read; a larger one is not uploaded (the runner says so in the log). */
export const REPORT_MAX_BYTES = 10 * 1024 * 1024;
/** Most report files one task attempt uploads; the rest are named in the log and left. */
export const REPORT_MAX_FILES = 20;
/** Most paths or globs under `reports: junit:`. */
export const REPORT_MAX_PATHS = 20;
/**
 * Most test cases one file may hold; a file with more is not read (its note
 * says so). Reading 20,000 took about 1.7 s on a shared 2-core machine.
 */
export const REPORT_MAX_CASES = 20_000;
/** Most failures kept per file; the rest are counted in its totals only. */
export const REPORT_MAX_FAILURES = 500;
/** A failure's message keeps its first lines, at most this many characters. */
export const MESSAGE_MAX_LINES = 20;
export const MESSAGE_MAX_CHARS = 4000;
/** A suite's, test's, class's or file's name is cut to this many characters. */
export const NAME_MAX_CHARS = 500;
/** Nesting of elements the parser follows (testsuites in testsuites, ...). */
export const MAX_DEPTH = 64;
