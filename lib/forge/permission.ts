// Asking the project's forge what people may do on its repository, with the project's own
// token (the forge's module says where and how to read the answer: Forge.permission):
//
// - confirmWriters: whether the people behind a pull request from the base repository may
//   write, on a forge where anyone who can read may open one (Gitea's AGit flow). Called by the
//   compile outside any transaction; anything short of a confirmed writer leaves the job
//   untrusted.
// - askRepoPermission: what a signed-in person may do (lib/app/people.ts).
import {
  callForge,
  DEFAULT_TIMEOUT_MS,
  type ForgeAnswer,
  ForgeRefusedError,
  ForgeTransportError,
  ForgeUnavailableError,
  forgeCall,
  transportErrorText,
} from './client.ts';
import type { ForgeKind, RepoPermission } from './forge.ts';
import { forgeOf } from './registry.ts';

export type { RepoPermission } from './forge.ts';

export interface WriterQuestion {
  forge: ForgeKind;
  /** The forge's base URL. */
  forgeUrl: string;
  /** `owner/name`. */
  repo: string;
  /** The project's forge token. */
  token: string;
  logins: string[];
}

/** Whether the forge confirmed every login as a writer, and why not when it did not. */
export interface WriterVerdict {
  writers: boolean;
  reason: string;
}

/**
 * Asks the forge about each login in turn; writers only when every one is confirmed. A refusal,
 * an unknown user or any answer that is not a write permission is a verdict (untrusted); a
 * forge that cannot be reached, answers 5xx or rate-limits is a ForgeUnavailableError, so the
 * compile is retried rather than settling trust on an outage.
 */
export async function confirmWriters(
  q: WriterQuestion,
  opts: { timeoutMs?: number } = {},
): Promise<WriterVerdict> {
  const forge = forgeOf(q.forge);
  const name = forge.title;
  if (q.logins.length === 0) {
    return { writers: false, reason: `the pull request names nobody for ${name} to confirm` };
  }
  const api = forge.apiBase({ githubApiUrl: '', forgeUrl: q.forgeUrl }) ?? '';
  const timeoutMs = opts.timeoutMs ?? DEFAULT_TIMEOUT_MS;
  for (const login of q.logins) {
    let res: ForgeAnswer;
    try {
      res = await callForge(
        forgeCall(forge, q.token, forge.permission.ask(api, q.repo, login), { timeoutMs }),
      );
    } catch (error) {
      // An address the control plane may not call, or a redirect (which
      // would carry the token elsewhere): no confirmation.
      if (error instanceof ForgeRefusedError) return { writers: false, reason: error.message };
      if (error instanceof ForgeTransportError) {
        throw new ForgeUnavailableError(
          `${name} at ${q.forgeUrl} could not be reached (${transportErrorText(error, timeoutMs)}) while asking whether ${login} may write to ${q.repo}`,
          { cause: error },
        );
      }
      throw error;
    }
    const status = res.status;
    if (res.kind === 'rate_limited' || res.kind === 'retryable') {
      throw new ForgeUnavailableError(
        `${name} at ${q.forgeUrl} answered HTTP ${status} while asking whether ${login} may write to ${q.repo}`,
      );
    }
    if (status === 401 || status === 403) {
      return {
        writers: false,
        reason: `${name} refused to say whether ${login} may write to ${q.repo} (HTTP ${status}): the project's forge token must belong to an administrator of the repository`,
      };
    }
    if (status === 404) {
      return { writers: false, reason: `${name} does not know ${login} (HTTP 404)` };
    }
    if (status !== 200) {
      return {
        writers: false,
        reason: `${name} answered HTTP ${status} when asked whether ${login} may write to ${q.repo}`,
      };
    }
    const raw = rawPermission(res.body);
    const permission = forge.permission.read(parse(res.body), login);
    if (permission !== 'write' && permission !== 'admin') {
      return {
        writers: false,
        reason: `${name} says ${login} has ${raw === null ? 'no readable' : JSON.stringify(raw)} permission on ${q.repo}, not write, admin or owner`,
      };
    }
  }
  return {
    writers: true,
    reason: `${name} confirmed that ${q.logins.join(' and ')} may write to ${q.repo}`,
  };
}

function parse(body: Buffer | null): unknown {
  try {
    return JSON.parse(body?.toString('utf8') ?? '');
  } catch {
    // Not JSON: no permission to read.
    return null;
  }
}

/** The forge's own word for the permission, for messages (`"read"`), when it gave one. */
function rawPermission(body: Buffer | null): string | null {
  const parsed = parse(body);
  if (typeof parsed === 'object' && parsed !== null && 'permission' in parsed) {
    const { permission } = parsed;
    return typeof permission === 'string' ? permission.toLowerCase() : null;
  }
  return null;
}

/** The forge's answer about a person, or why it gave none (a refusal: no retry changes it). */
export type PermissionAnswer =
  | { kind: 'answer'; permission: RepoPermission }
  | { kind: 'refused'; reason: string };

/**
 * Asks the forge what `login` may do on `repo`, with the project's token (GitHub and Gitea:
 * `collaborators/{login}/permission`; GitLab: the project's members). A 404 is no access. A
 * forge that cannot be reached, answers 5xx or rate-limits is a ForgeUnavailableError (nothing
 * is decided on an outage).
 */
export async function askRepoPermission(q: {
  forge: ForgeKind;
  /** The forge's API base (Forge.apiBase). */
  api: string;
  repo: string;
  login: string;
  token: string;
  timeoutMs?: number;
}): Promise<PermissionAnswer> {
  const forge = forgeOf(q.forge);
  const timeoutMs = q.timeoutMs ?? DEFAULT_TIMEOUT_MS;
  const who = forge.title;
  let res: ForgeAnswer;
  try {
    res = await callForge(
      forgeCall(forge, q.token, forge.permission.ask(q.api, q.repo, q.login), { timeoutMs }),
    );
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
  const permission = forge.permission.read(parse(res.body), q.login);
  if (permission === null) {
    const raw = rawPermission(res.body);
    return {
      kind: 'refused',
      reason: `${who} answered ${raw === null ? 'no readable permission' : JSON.stringify(raw)} for ${q.login} on ${q.repo}`,
    };
  }
  return { kind: 'answer', permission };
}
