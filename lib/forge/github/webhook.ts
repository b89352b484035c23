// GitHub's webhook dialect, which Gitea (and Forgejo) speak too: the same event names, the same
// payload fields under the same meanings. The dialects differ only in how far a pull request
// from the base repository is trusted (`agit`, Gitea's), and in headers (each module's own).

import { ValidationError, type ValidationIssue } from '../../errors.ts';
import * as z from '../../zod.ts';
import type { WebhookIntent } from '../forge.ts';
import {
  botLogins,
  branchName,
  check,
  describe,
  isCommitSha,
  isPlainObject,
  NameSchema,
  type Outcome,
  PullNumberSchema,
  ShaSchema,
  ZERO_SHA,
} from '../payload.ts';

const RepoSchema = z.looseObject({ full_name: NameSchema });

const EnvelopeSchema = z.looseObject({ repository: RepoSchema });

// A push needs the ref, the new sha and the repository, nothing else. Both forges document more
// (`before`, `commits`, `pusher`, `sender`, `compare`/`compare_url`), and older Gitea and
// Gogs-compatible senders leave out `head_commit`, which GitHub sends as null for some pushes;
// none of them is read here except `head_commit` for tags, and then only when it is usable.
// Gitea's deprecated top-level `secret` is never read: only the signature header authenticates.
const PushSchema = z.looseObject({
  ref: NameSchema,
  after: ShaSchema,
  // GitHub only; an all-zero `after` marks a deleted ref on either forge.
  deleted: z.nullish(z.boolean()),
  head_commit: z.optional(z.unknown()),
});

const ActionSchema = z.looseObject({ action: NameSchema });

// What a pull request build needs: its number (top level, or inside `pull_request`), the head
// sha, the base ref, and the head and base repositories where the forge has them. GitHub and
// Gitea both write `head.repo: null` when the fork was deleted, which makes the job untrusted;
// a missing `base.repo` is the webhook's `repository`. Every other field (title, user, labels,
// `head.ref`, `merge_base`, `sender`, ...) may be absent or null.
const PullRequestBuildSchema = z.looseObject({
  number: z.nullish(PullNumberSchema),
  pull_request: z.looseObject({
    number: z.nullish(PullNumberSchema),
    head: z.looseObject({
      sha: ShaSchema,
      repo: z.nullish(RepoSchema),
    }),
    base: z.looseObject({ ref: NameSchema, repo: z.nullish(RepoSchema) }),
  }),
});

// Closing needs only the number, so a closed delivery with a thin or null `pull_request` still
// cancels that pull request's jobs.
const PullRequestCloseSchema = z.looseObject({
  number: z.nullish(PullNumberSchema),
  pull_request: z.nullish(z.looseObject({ number: z.nullish(PullNumberSchema) })),
});

// GitHub spells it `synchronize`, Gitea `synchronized`; either is accepted from either forge.
const BUILD_ACTIONS = new Set(['opened', 'synchronize', 'synchronized', 'reopened']);

/**
 * Reads a parsed JSON payload of GitHub's dialect leniently (unknown fields ignored). `repo` is
 * `repository.full_name`, required for every event because it is how the project is found. A
 * field the event needs that is missing or of the wrong type is a ValidationError whose issue
 * path names the field, e.g. `pull_request.head.sha`. With `agit`, a pull request from the base
 * repository waits for the forge to confirm its people as writers.
 */
export function parseHubWebhook(
  event: string,
  payload: unknown,
  opts: { agit: boolean },
): WebhookIntent {
  if (!isPlainObject(payload)) {
    throw new ValidationError([
      { path: '', message: `expected a JSON object, got ${describe(payload)}` },
    ]);
  }
  const issues: ValidationIssue[] = [];
  const envelope = check(EnvelopeSchema, payload, issues);
  const outcome = readEvent(event, payload, envelope?.repository.full_name, issues, opts.agit);
  if (issues.length > 0 || envelope === undefined || outcome === undefined) {
    throw new ValidationError(issues);
  }
  return { ...outcome, repo: envelope.repository.full_name };
}

function readEvent(
  event: string,
  payload: Record<string, unknown>,
  repo: string | undefined,
  issues: ValidationIssue[],
  agit: boolean,
): Outcome | undefined {
  switch (event) {
    case 'push':
      return readPush(payload, issues);
    case 'pull_request':
      return readPullRequest(payload, repo, issues, agit);
    case 'ping':
      return { kind: 'ignore', reason: 'ping' };
    case 'delete': {
      const ref = payload.ref;
      return {
        kind: 'ignore',
        reason: typeof ref === 'string' && ref !== '' ? `deleted ref ${ref}` : 'deleted ref',
      };
    }
    case 'create':
      // A new branch or tag also arrives as a push event, which is the one that builds.
      return { kind: 'ignore', reason: 'create event: the push event for the new ref builds it' };
    default:
      return { kind: 'ignore', reason: `event ${JSON.stringify(event)} triggers nothing` };
  }
}

function readPush(
  payload: Record<string, unknown>,
  issues: ValidationIssue[],
): Outcome | undefined {
  const push = check(PushSchema, payload, issues);
  if (push === undefined) return undefined;
  if (push.deleted === true || ZERO_SHA.test(push.after)) {
    return { kind: 'ignore', reason: `deleted ref ${push.ref}` };
  }
  let trigger: 'push' | 'tag';
  let sha = push.after;
  if (push.ref.startsWith('refs/heads/')) {
    trigger = 'push';
  } else if (push.ref.startsWith('refs/tags/')) {
    trigger = 'tag';
    // For an annotated tag `after` is the tag object, which neither forge's file API nor its
    // status API accepts as a commit; both name the tagged commit in `head_commit.id`
    // (GitHub since 2021, Gitea since 1.16). A lightweight tag has the same sha in both.
    sha = taggedCommit(push.head_commit) ?? push.after;
  } else {
    return { kind: 'ignore', reason: `push to ${push.ref} is neither a branch nor a tag` };
  }
  // A bot's branch is the head of the pull request it is about to open (Dependabot and Renovate
  // push the branch first), so it is held to the same rule. The default branch is not: what
  // lands there was merged by someone who may, and a release bot's tag is its own.
  const defaultBranch = hubDefaultBranch(payload);
  const bots =
    trigger === 'push' && push.ref !== (defaultBranch && `refs/heads/${defaultBranch}`)
      ? botLogins([payload.sender, payload.pusher])
      : [];
  return {
    kind: 'build',
    trigger,
    ref: push.ref,
    sha,
    baseRef: null,
    pullRequest: null,
    trusted: true,
    ...(bots.length > 0 ? { bots } : {}),
  };
}

/** `repository.default_branch` of a push or pull request payload, when it names a branch. */
export function hubDefaultBranch(payload: unknown): string | undefined {
  const repo = isPlainObject(payload) ? payload.repository : undefined;
  return branchName(isPlainObject(repo) ? repo.default_branch : undefined);
}

function taggedCommit(headCommit: unknown): string | undefined {
  if (!isPlainObject(headCommit)) return undefined;
  const id = headCommit.id;
  return typeof id === 'string' && isCommitSha(id) ? id : undefined;
}

function readPullRequest(
  payload: Record<string, unknown>,
  repo: string | undefined,
  issues: ValidationIssue[],
  agit: boolean,
): Outcome | undefined {
  const action = check(ActionSchema, payload, issues)?.action;
  if (action === undefined) return undefined;
  if (action === 'closed') {
    const closed = check(PullRequestCloseSchema, payload, issues);
    if (closed === undefined) return undefined;
    const number = pullNumber(closed.number, closed.pull_request?.number, issues);
    return number === undefined ? undefined : { kind: 'close_pull_request', pullRequest: number };
  }
  if (!BUILD_ACTIONS.has(action)) {
    return {
      kind: 'ignore',
      reason: `pull_request action ${JSON.stringify(action)} triggers nothing`,
    };
  }
  const body = check(PullRequestBuildSchema, payload, issues);
  if (body === undefined) return undefined;
  const pr = body.pull_request;
  const number = pullNumber(body.number, pr.number, issues);
  if (number === undefined) return undefined;
  // The pull request lives in the base repository, which is also the webhook's `repository`.
  const baseRepo = pr.base.repo?.full_name ?? repo;
  // Only a branch of the same repository is trusted with secrets: anyone can open a pull
  // request from a fork, and a deleted fork (head.repo null) is no better. Names compare
  // exactly; a case mismatch makes a job untrusted, which is the safe way to be wrong.
  const headRepo = pr.head.repo?.full_name;
  const sameRepo = headRepo !== undefined && headRepo === baseRepo;
  // Who opened or updated it, and whose it is: a person reopening or pushing to a bot's pull
  // request does not make the bot's code theirs.
  const bots = botLogins([
    payload.sender,
    isPlainObject(payload.pull_request) ? payload.pull_request.user : undefined,
  ]);
  const build = {
    kind: 'build',
    trigger: 'pull_request',
    ref: `refs/pull/${number}/head`,
    sha: pr.head.sha,
    baseRef: pr.base.ref,
    pullRequest: number,
    ...(bots.length > 0 ? { bots } : {}),
  } as const;
  // On GitHub only someone with write access can push a branch to the base repository. On
  // Gitea anyone who can read it can open a pull request from it by pushing to
  // `refs/for/<branch>` (the AGit flow), so the head repository proves nothing there: the job
  // starts untrusted, and the compile asks Gitea whether these people may write.
  if (agit && sameRepo) {
    return { ...build, trusted: false, confirmWriters: giteaLogins(payload) };
  }
  return { ...build, trusted: sameRepo };
}

/**
 * Who a Gitea pull request event speaks for: its `sender` (who pushed, opened or reopened) and
 * the pull request's author (whose code it is, when someone else reopened it). Read leniently:
 * a missing or odd field only leaves its login out, and with nobody named the job stays
 * untrusted.
 */
function giteaLogins(payload: Record<string, unknown>): string[] {
  const pr = isPlainObject(payload.pull_request) ? payload.pull_request : {};
  const logins: string[] = [];
  for (const user of [payload.sender, pr.user]) {
    if (!isPlainObject(user)) continue;
    const login = [user.login, user.username].find(
      (v): v is string => typeof v === 'string' && LOGIN.test(v),
    );
    if (login && !logins.some((l) => l.toLowerCase() === login.toLowerCase())) logins.push(login);
  }
  return logins;
}

// Gitea user names: letters, digits, `-`, `_` and `.`; anything else is not asked about.
const LOGIN = /^[A-Za-z0-9_.-]{1,100}$/;

function pullNumber(
  top: number | null | undefined,
  nested: number | null | undefined,
  issues: ValidationIssue[],
): number | undefined {
  const number = top ?? nested ?? undefined;
  if (number === undefined) issues.push({ path: 'number', message: 'missing' });
  return number;
}

/** The clone URL and the web page's base a hub-dialect payload tells of. */
export function hubRepository(payload: unknown): Record<string, unknown> | undefined {
  const repository = isPlainObject(payload) ? payload.repository : undefined;
  return isPlainObject(repository) ? repository : undefined;
}
