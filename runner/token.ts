// Where the worker token comes from (a file, or the environment), and how the
// runner makes it leave its own environment before any script starts.
import { closeSync, openSync, readFileSync, readSync, writeSync } from 'node:fs';
import { readFile } from 'node:fs/promises';

/** The variable a runner may take its token from (the other way is --token-file). */
export const TOKEN_VARIABLE = 'CONDUCTOR_RUNNER_TOKEN';

/** Reads the worker token from `path`: one line, surrounding whitespace ignored. */
export async function readTokenFile(path: string): Promise<string> {
  let text: string;
  try {
    text = await readFile(path, 'utf8');
  } catch (err) {
    const code = (err as NodeJS.ErrnoException).code ?? String(err);
    // The token itself given in place of a path: not echoed back.
    if (code === 'ENOENT' && /^c[wa]_/.test(path)) {
      throw new Error('--token-file takes the path of a file that holds the token, not the token');
    }
    throw new Error(`--token-file ${path} cannot be read (${code})`);
  }
  const token = text.trim();
  // The error never quotes the file: it holds the token.
  if (!token) throw new Error(`--token-file ${path} is empty`);
  if (/\s/.test(token))
    throw new Error(`--token-file ${path} must hold the token alone, on one line`);
  return token;
}

/**
 * Removes every variable whose value holds `token` from `env`. When `env` is
 * this process's own environment, also blanks those variables in the block the
 * kernel shows as /proc/<pid>/environ: that block is what the process was
 * started with, and deleting from process.env (unsetenv) leaves it as it was.
 * Throws when the block still holds the token afterwards.
 */
export function forgetToken(env: NodeJS.ProcessEnv, token: string): void {
  for (const [name, value] of Object.entries(env)) {
    if (value?.includes(token)) delete env[name];
  }
  if (env === process.env) blankInitialEnvironment(token);
}

/** The start and end of this process's initial environment block (fields 50 and 51 of /proc/self/stat). */
function environmentBlock(): { start: number; end: number } | undefined {
  let stat: string;
  try {
    stat = readFileSync('/proc/self/stat', 'utf8');
  } catch {
    return undefined; // No procfs: nothing shows the block to anyone.
  }
  // The command name (field 2) may hold spaces; the fields after it do not.
  const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
  const start = fields[50 - 3];
  const end = fields[51 - 3];
  if (!start || !end) throw new Error('/proc/self/stat has no env_start and env_end');
  // User-space addresses are below 2^47: exact as numbers.
  return { start: Number(start), end: Number(end) };
}

function blankInitialEnvironment(token: string): void {
  const block = environmentBlock();
  if (!block) return;
  const needle = Buffer.from(token);
  // A process may write its own memory through /proc/self/mem; the block is
  // on its stack, so the write needs no forced access.
  const fd = openSync('/proc/self/mem', 'r+');
  try {
    const bytes = Buffer.alloc(block.end - block.start);
    readSync(fd, bytes, 0, bytes.length, block.start);
    let changed = false;
    let from = 0;
    while (from < bytes.length) {
      let to = bytes.indexOf(0, from);
      if (to === -1) to = bytes.length;
      if (bytes.subarray(from, to).includes(needle)) {
        // NULs in place of the whole NAME=value: the block keeps its length,
        // and no reader of it sees a trace of the variable.
        bytes.fill(0, from, to);
        changed = true;
      }
      from = to + 1;
    }
    if (changed) writeSync(fd, bytes, 0, bytes.length, block.start);
  } finally {
    closeSync(fd);
  }
  if (readFileSync('/proc/self/environ').includes(needle)) {
    throw new Error('/proc/self/environ still holds it after it was overwritten');
  }
}
