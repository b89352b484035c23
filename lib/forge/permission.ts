// Asking Gitea whether people may write to a repository, for the trust of a pull request from
// the base repository (anyone who can read a Gitea repository can open one with the AGit flow).
// Called by the compile outside any transaction.
//
//   GET {forge_url}/api/v1/repos/{owner}/{repo}/collaborators/{login}/permission
//   200 {"permission": "none" | "read" | "write" | "admin" | "owner", "role_name", "user"}
//
// Gitea answers this only to a site administrator, a repository administrator, or the user
// asked about; anything short of a confirmed writer leaves the job untrusted.
//
// And asking GitHub or Gitea what a signed-in person may do (askRepoPermission, for
// lib/app/people.ts): the same route on both, GitHub's under its API base.
import {
  apiBase,
  callForge,
  DEFAULT_TIMEOUT_MS,
  type ForgeAnswer,
  type ForgeKind,
  ForgeRefusedError,
  ForgeTransportError,
  ForgeUnavailableError,
  forgeHeaders,
  forgeName,
  transportErrorText,
} from './client.ts';

/** The permissions Gitea names for people who may push to the repository. */
export const WRITE_PERMISSIONS: readonly string[] = ['write', 'admin', 'owner'];

export interface WriterQuestion {
  /** Gitea's base URL. */
  forgeUrl: string;
  /** `owner/name`. */
  repo: string;
  /** The project's forge token. */
  token: string;
  logins: string[];
}

/** Whether Gitea confirmed every login as a writer, and why not when it did not. */
export interface WriterVerdict {
  writers: boolean;
  reason: string;
}

/**
 * Asks Gitea about each login in turn; writers only when every one is confirmed. A refusal, an
 * unknown user or any answer that is not a write permission is a verdict (untrusted); a forge
 * that cannot be reached, answers 5xx or rate-limits is a ForgeUnavailableError, so the compile
 * is retried rather than settling trust on an outage.
 */
export async function confirmGiteaWriters(
  q: WriterQuestion,
  opts: { timeoutMs?: number } = {},
): Promise<WriterVerdict> {
  if (q.logins.length === 0) {
    return { writers: false, reason: 'the pull request names nobody for Gitea to confirm' };
  }
  const [owner = '', name = ''] = q.repo.split('/');
  const base = `${apiBase('gitea', { githubApiUrl: '', forgeUrl: q.forgeUrl })}/repos/${encodeURIComponent(owner)}/${encodeURIComponent(name)}`;
  const timeoutMs = opts.timeoutMs ?? DEFAULT_TIMEOUT_MS;
  for (const login of q.logins) {
    const url = `${base}/collaborators/${encodeURIComponent(login)}/permission`;
    let res: ForgeAnswer;
    try {
      res = await callForge({ url, headers: forgeHeaders('gitea', q.token), timeoutMs });
    } catch (error) {
      // An address the control plane may not call, or a redirect (which
      // would carry the token elsewhere): no confirmation.
      if (error instanceof ForgeRefusedError) return { writers: false, reason: error.message };
      if (error instanceof ForgeTransportError) {
        throw new ForgeUnavailableError(
          `Gitea at ${q.forgeUrl} could not be reached (${transportErrorText(error, timeoutMs)}) while asking whether ${login} may write to ${q.repo}`,
          { cause: error },
        );
      }
      throw error;
    }
    const status = res.status;
    if (res.kind === 'rate_limited' || res.kind === 'retryable') {
      throw new ForgeUnavailableError(
        `Gitea at ${q.forgeUrl} answered HTTP ${status} while asking whether ${login} may write to ${q.repo}`,
      );
    }
    if (status === 401 || status === 403) {
      return {
        writers: false,
        reason: `Gitea refused to say whether ${login} may write to ${q.repo} (HTTP ${status}): the project's forge token must belong to an administrator of the repository`,
      };
    }
    if (status === 404) {
      return { writers: false, reason: `Gitea does not know ${login} (HTTP 404)` };
    }
    if (status !== 200) {
      return {
        writers: false,
        reason: `Gitea answered HTTP ${status} when asked whether ${login} may write to ${q.repo}`,
      };
    }
    const permission = permissionOf(res.body?.toString('utf8') ?? '');
    if (permission === null || !WRITE_PERMISSIONS.includes(permission)) {
      return {
        writers: false,
        reason: `Gitea says ${login} has ${permission === null ? 'no readable' : JSON.stringify(permission)} permission on ${q.repo}, not write, admin or owner`,
      };
    }
  }
  return {
    writers: true,
    reason: `Gitea confirmed that ${q.logins.join(' and ')} may write to ${q.repo}`,
  };
}

function permissionOf(body: string): string | null {
  try {
    const parsed: unknown = JSON.parse(body);
    if (typeof parsed === 'object' && parsed !== null && 'permission' in parsed) {
      const { permission } = parsed;
      return typeof permission === 'string' ? permission.toLowerCase() : null;
    }
  } catch {
    // Not JSON: no permission to read.
  }
  return null;
}

/** What a person may do on a repository, as Conductor reads the forge's answer. */
export type RepoPermission = 'none' | 'read' | 'write' | 'admin';

/** The forge's answer about a person, or why it gave none (a refusal: no retry changes it). */
export type PermissionAnswer =
  | { kind: 'answer'; permission: RepoPermission }
  | { kind: 'refused'; reason: string };

/**
 * Asks GitHub or Gitea what `login` may do on `repo`, with the project's token:
 * `GET {api}/repos/{owner}/{repo}/collaborators/{login}/permission` on both
 * (GitHub's `permission` is admin, write, read or none; Gitea's adds owner).
 * A 404 is no access. A forge that cannot be reached, answers 5xx or
 * rate-limits is a ForgeUnavailableError (nothing is decided on an outage).
 */
export async function askRepoPermission(q: {
  forge: ForgeKind;
  /** The forge's API base (apiBase()). */
  api: string;
  repo: string;
  login: string;
  token: string;
  timeoutMs?: number;
}): Promise<PermissionAnswer> {
  const [owner = '', name = ''] = q.repo.split('/');
  const url = `${q.api}/repos/${encodeURIComponent(owner)}/${encodeURIComponent(name)}/collaborators/${encodeURIComponent(q.login)}/permission`;
  const timeoutMs = q.timeoutMs ?? DEFAULT_TIMEOUT_MS;
  const who = forgeName(q.forge);
  let res: ForgeAnswer;
  try {
    res = await callForge({ url, headers: forgeHeaders(q.forge, q.token), timeoutMs });
  } catch (error) {
    if (error instanceof ForgeRefusedError) return { kind: 'refused', reason: error.message };
    if (error instanceof ForgeTransportError) {
      throw new ForgeUnavailableError(
        `${who} could not be reached (${transportErrorText(error, timeoutMs)}) while asking what ${q.login} may do on ${q.repo}`,
        { cause: error },
      );
    }
    throw error;
  }
  if (res.kind === 'rate_limited' || res.kind === 'retryable') {
    throw new ForgeUnavailableError(
      `${who} answered HTTP ${res.status} while asking what ${q.login} may do on ${q.repo}`,
    );
  }
  if (res.status === 404) return { kind: 'answer', permission: 'none' };
  if (res.status !== 200) {
    return {
      kind: 'refused',
      reason: `${who} refused to say what ${q.login} may do on ${q.repo} (HTTP ${res.status}): the project's forge token must be allowed to read the repository's collaborators`,
    };
  }
  const permission = permissionOf(res.body?.toString('utf8') ?? '');
  switch (permission) {
    case 'owner':
    case 'admin':
      return { kind: 'answer', permission: 'admin' };
    case 'write':
    case 'read':
    case 'none':
      return { kind: 'answer', permission };
    default:
      return {
        kind: 'refused',
        reason: `${who} answered ${permission === null ? 'no readable permission' : JSON.stringify(permission)} for ${q.login} on ${q.repo}`,
      };
  }
}
