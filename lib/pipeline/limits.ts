/** The file a pipeline lives in, at the root of the repository. */
export const PIPELINE_FILE = '.conductor.yml';

/** Larger files are refused before parsing, so a hostile push cannot make the compiler chew on megabytes. */
export const MAX_PIPELINE_BYTES = 1024 * 1024;

/** The most tasks one job may hold after matrix expansion, counted before `only` filtering. */
export const MAX_TASKS = 500;

/** The most outputs one task may promise; each expansion of each producer is a variable to check. */
export const MAX_OUTPUTS = 100;
