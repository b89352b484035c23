// The environment a script sees. Names built from task, matrix and output
// names go through the pipeline's envFragment rule, the same one the compiler
// uses to reject names that would clash.
import { envFragment } from '../lib/pipeline/names.ts';
import type { Task } from './protocol.ts';

/** Where the script runs and writes its outputs, as the script sees those paths. */
export interface ScriptPaths {
  workspace: string;
  outputFile: string;
}

/**
 * The variables a task defines for its script, lowest precedence first: `CI`,
 * the task's `env`, its secrets, then the runner's own `CONDUCTOR_*` variables,
 * which a pipeline cannot override.
 */
export function taskVariables(task: Task, paths: ScriptPaths): Record<string, string> {
  const vars: Record<string, string> = { CI: 'true', ...task.env, ...task.secrets };
  vars.CONDUCTOR_JOB_ID = task.job_id;
  vars.CONDUCTOR_TASK_ID = task.id;
  vars.CONDUCTOR_TASK_NAME = task.name;
  vars.CONDUCTOR_SHA = task.repo.sha;
  vars.CONDUCTOR_REF = task.repo.ref;
  vars.CONDUCTOR_ATTEMPT = String(task.attempt);
  vars.CONDUCTOR_WORKSPACE = paths.workspace;
  vars.CONDUCTOR_OUTPUT = paths.outputFile;
  for (const [key, value] of Object.entries(task.matrix)) {
    vars[`CONDUCTOR_MATRIX_${envFragment(key)}`] = value;
  }
  for (const [need, outputs] of Object.entries(task.needs_outputs)) {
    for (const [output, value] of Object.entries(outputs)) {
      vars[`CONDUCTOR_NEEDS_${envFragment(need)}_${envFragment(output)}`] = value;
    }
  }
  return vars;
}

// Variables that point git at another repository than the one in the current
// directory (set, say, when the runner is started from a git hook).
const GIT_LOCATION = new Set([
  'GIT_DIR',
  'GIT_WORK_TREE',
  'GIT_INDEX_FILE',
  'GIT_OBJECT_DIRECTORY',
  'GIT_ALTERNATE_OBJECT_DIRECTORIES',
  'GIT_COMMON_DIR',
  'GIT_NAMESPACE',
  'GIT_PREFIX',
]);

function holdsAny(value: string, hidden: string[]): boolean {
  return hidden.some((h) => h.length > 0 && value.includes(h));
}

/**
 * The environment the runner's own tools (git, the docker CLI) run with: the
 * runner's, without any `CONDUCTOR_*` variable (its configuration), without
 * any variable holding one of `hidden` (the worker token, the control plane's
 * URL) and without the variables that would point git elsewhere. Scripts never
 * see it.
 */
export function toolEnvironment(env: NodeJS.ProcessEnv, hidden: string[]): Record<string, string> {
  const out: Record<string, string> = {};
  for (const [name, value] of Object.entries(env)) {
    if (value === undefined) continue;
    if (name.startsWith('CONDUCTOR_') || GIT_LOCATION.has(name)) continue;
    if (holdsAny(value, hidden)) continue;
    out[name] = value;
  }
  return out;
}

/** The variables a script on the host takes from the runner's environment, when set there. */
export const PASSED_VARIABLES = ['PATH', 'LANG', 'LC_ALL', 'TZ'] as const;

const DEFAULT_PATH = '/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin';

/**
 * The environment a script on the host starts from, built from scratch rather
 * than inherited: `PASSED_VARIABLES` from the runner's environment (unless one
 * holds one of `hidden`), and HOME, USER and LOGNAME of the user the script
 * runs as. The task's variables go on top (taskVariables).
 */
export function scriptEnvironment(
  env: NodeJS.ProcessEnv,
  user: { name: string; home: string },
  hidden: string[],
): Record<string, string> {
  const out: Record<string, string> = { PATH: DEFAULT_PATH };
  for (const name of PASSED_VARIABLES) {
    const value = env[name];
    if (value && !holdsAny(value, hidden)) out[name] = value;
  }
  out.HOME = user.home;
  out.USER = user.name;
  out.LOGNAME = user.name;
  return out;
}

/** A shell word that stands for `value` exactly, in bash and in POSIX sh. */
export function shellQuote(value: string): string {
  return `'${value.replaceAll("'", `'\\''`)}'`;
}

const SHELL_NAME = /^[A-Za-z_][A-Za-z0-9_]*$/;

/** A file of `export NAME='value'` lines that any POSIX shell can source; other names are left out. */
export function exportFile(vars: Record<string, string>): string {
  return Object.entries(vars)
    .filter(([name]) => SHELL_NAME.test(name))
    .map(([name, value]) => `export ${name}=${shellQuote(value)}\n`)
    .join('');
}
