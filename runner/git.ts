// Fetching the one commit a task builds into a fresh workspace.
import { isAbsolute, resolve } from 'node:path';
import { run } from './process.ts';

export interface Repo {
  url: string;
  sha: string;
  ref: string;
  token?: string;
}

/** The checkout failed; the message ends with what git said. */
export class CheckoutError extends Error {
  /** What git printed, for the task's log. */
  readonly output: string;
  constructor(message: string, output: string) {
    super(message);
    this.name = 'CheckoutError';
    this.output = output;
  }
}

const SHA = /^[0-9a-f]{7,64}$/i;

/** True when the token may be sent to this URL: https, or http to this machine. */
export function mayCarryToken(url: string): boolean {
  let parsed: URL;
  try {
    parsed = new URL(url);
  } catch {
    return false;
  }
  if (parsed.protocol === 'https:') return true;
  return (
    parsed.protocol === 'http:' && ['localhost', '127.0.0.1', '[::1]'].includes(parsed.hostname)
  );
}

/**
 * The Basic credential for a clone token. x-access-token is what GitHub
 * documents for app and personal tokens; Gitea takes a token as the password
 * with any user name.
 */
export function basicCredential(token: string): string {
  return Buffer.from(`x-access-token:${token}`).toString('base64');
}

/**
 * The environment git runs with: the clone token, when there is one, becomes
 * an `http.extraHeader` given through GIT_CONFIG_* variables, so it is on no
 * command line (`ps`) and in no URL (git prints URLs in its messages).
 */
export function gitEnvironment(base: Record<string, string>, repo: Repo): Record<string, string> {
  const env: Record<string, string> = { ...base, GIT_TERMINAL_PROMPT: '0' };
  if (repo.token && mayCarryToken(repo.url)) {
    env.GIT_CONFIG_COUNT = '1';
    env.GIT_CONFIG_KEY_0 = 'http.extraHeader';
    env.GIT_CONFIG_VALUE_0 = `Authorization: Basic ${basicCredential(repo.token)}`;
  }
  return env;
}

/**
 * The URL as git in the workspace should see it: a relative local path is
 * taken from the runner's working directory, since git runs in the workspace.
 */
export function fetchUrl(url: string, cwd = process.cwd()): string {
  const colon = url.indexOf(':');
  const slash = url.indexOf('/');
  // A scheme (https://, file://) or scp-like syntax (git@host:path) has a colon before any slash.
  const hasScheme = colon !== -1 && (slash === -1 || colon < slash);
  return hasScheme || isAbsolute(url) ? url : resolve(cwd, url);
}

/** The URL with any user name and password in it replaced by ***, for messages. */
export function redactUrl(url: string): string {
  return url.replace(/^([a-z][a-z0-9+.-]*:\/\/)[^/@]*@/i, '$1***@');
}

function lastLines(output: string, n = 3): string {
  return output.trim().split('\n').slice(-n).join(' / ').slice(0, 500);
}

/**
 * Makes `dir` a repository holding `repo.sha`, checked out detached: fetches
 * that commit alone, or, when the server will not hand out a commit by its
 * id, the ref (then its whole history if the commit is not its tip).
 */
export async function checkout(
  repo: Repo,
  dir: string,
  opts: { env: Record<string, string>; signal?: AbortSignal },
): Promise<void> {
  if (!SHA.test(repo.sha)) throw new CheckoutError(`"${repo.sha}" is not a commit id`, '');
  const env = gitEnvironment(opts.env, repo);
  const url = fetchUrl(repo.url);
  const shown = redactUrl(repo.url);
  let transcript = '';
  const git = async (...args: string[]) => {
    const result = await run('git', args, {
      env,
      cwd: dir,
      ...(opts.signal ? { signal: opts.signal } : {}),
    });
    transcript += result.output;
    return result;
  };
  const fail = (what: string, output: string): never => {
    throw new CheckoutError(`${what}: ${lastLines(output) || 'git failed'}`, transcript);
  };

  const init = await git('init', '-q', '.');
  if (init.code !== 0) fail('git init failed', init.output);
  // `--` keeps a URL or ref that starts with - from being read as an option.
  const fetch = (...what: string[]) => git('fetch', '-q', '--no-tags', ...what);
  let fetched = await fetch('--depth', '1', '--', url, repo.sha);
  if (fetched.code !== 0) {
    fetched = await fetch('--depth', '1', '--', url, repo.ref);
    if (fetched.code !== 0) fail(`fetching ${repo.ref} from ${shown} failed`, fetched.output);
    const present = await git('cat-file', '-e', `${repo.sha}^{commit}`);
    if (present.code !== 0) {
      fetched = await fetch('--unshallow', '--', url, repo.ref);
      if (fetched.code !== 0) fail(`fetching ${repo.ref} from ${shown} failed`, fetched.output);
    }
  }
  const checked = await git(
    '-c',
    'advice.detachedHead=false',
    'checkout',
    '-q',
    '--detach',
    repo.sha,
  );
  if (checked.code !== 0) {
    fail(`checking out ${repo.sha} (${repo.ref}) from ${shown} failed`, checked.output);
  }
}
