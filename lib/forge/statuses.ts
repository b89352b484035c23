// Posting one commit status to the project's forge, through the forge client
// (the forge's module says where and in which words: Forge.status):
//
//   GitHub  POST {api}/repos/{owner}/{repo}/statuses/{sha}
//   Gitea   POST {forge_url}/api/v1/repos/{owner}/{repo}/statuses/{sha}
//   GitLab  POST {forge_url}/api/v4/projects/{group%2Fname}/statuses/{sha}
//
// Which statuses to post, when, and what to do with a failure is
// lib/app/statuses.ts (the outbox's deliverer); this module only speaks to
// the forge and says whether a failure may pass.
import {
  callForge,
  type ForgeAnswer,
  ForgeRefusedError,
  ForgeTransportError,
  forgeCall,
  transportErrorText,
} from './client.ts';
import type { ForgeKind } from './forge.ts';
import { forgeOf } from './registry.ts';

/** Where a project's statuses go. */
export interface StatusTarget {
  forge: ForgeKind;
  /** `owner/name` on the forge. */
  repo: string;
  /** The forge's base URL (Gitea's, GitLab's); unused for GitHub. */
  forgeUrl: string | null;
  /** GitHub's REST API base. */
  githubApiUrl: string;
  token: string;
}

export interface CommitStatus {
  sha: string;
  state: string;
  /** The pipeline's name: the status's context is `conductor/<name>`, or `conductor`. */
  pipelineName: string | null;
  /** False for an untrusted job: its context ends in ` (untrusted)` (see statusContext). */
  trusted: boolean;
  description: string;
  /** The page the status links to, if any. */
  targetUrl?: string;
}

/**
 * The context a job's status is posted under: `conductor`, or
 * `conductor/<pipeline name>`, and for an untrusted job (a fork's or a bot's
 * pull request, and their reruns) the same with ` (untrusted)` after it. The
 * forge keeps one status per commit and context, and a fork's pull request
 * may have a commit of main as its head: under the same context its
 * "waiting for approval" would replace main's green status, and its own run
 * would then speak for main. A pipeline name comes from the pipeline file,
 * which an untrusted job's author wrote, so the suffix is added after it and
 * no name can take it off.
 */
export function statusContext(pipelineName: string | null, trusted: boolean): string {
  const context = pipelineName ? `conductor/${pipelineName}` : 'conductor';
  return trusted ? context : `${context} (untrusted)`;
}

/** A refusal that retrying cannot fix: the deliverer gives the status up. */
export class StatusRefusedError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'StatusRefusedError';
  }
}

/**
 * Posts one status. A refusal (a bad token, no such repository or commit, an
 * address the control plane may not call, a redirect) throws
 * StatusRefusedError; anything that may pass (the network, a timeout, a rate
 * limit, a 5xx) throws a plain Error naming the forge and the URL.
 */
export async function postStatus(
  target: StatusTarget,
  status: CommitStatus,
  timeoutMs = 10_000,
): Promise<void> {
  const forge = forgeOf(target.forge);
  const base = forge.apiBase({ githubApiUrl: target.githubApiUrl, forgeUrl: target.forgeUrl });
  if (base === null) throw new StatusRefusedError('the project has no forge_url');
  const request = forge.status(base, target.repo, status.sha, {
    state: status.state,
    context: statusContext(status.pipelineName, status.trusted),
    description: status.description,
    ...(status.targetUrl ? { targetUrl: status.targetUrl } : {}),
  });
  const url = request.url;
  let res: ForgeAnswer;
  try {
    res = await callForge(forgeCall(forge, target.token, request, { timeoutMs }));
  } catch (err) {
    // An address the control plane may not call, or a redirect: the
    // project's URL is wrong, and retrying will not right it.
    if (err instanceof ForgeRefusedError) throw new StatusRefusedError(err.message);
    if (err instanceof ForgeTransportError) {
      throw new Error(
        `could not reach ${target.forge} at ${url}: ${transportErrorText(err, timeoutMs)}`,
      );
    }
    throw err;
  }
  if (res.kind === 'ok') return;
  const message = `${target.forge} answered HTTP ${res.status} for ${url}`;
  // A refusal (bad token, no such repository or commit) stays a refusal;
  // rate limits and server errors pass.
  if (res.kind === 'permanent') throw new StatusRefusedError(message);
  throw new Error(message);
}
