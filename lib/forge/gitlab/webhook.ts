// GitLab's webhook dialect (docs.gitlab.com, "Webhook events"): the event in `X-Gitlab-Event`
// (`Push Hook`, `Tag Push Hook`, `Merge Request Hook`), the project in
// `project.path_with_namespace`, and for a merge request `object_attributes` with its `iid`,
// `action`, branches, source and target project ids and `last_commit`.

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

const EnvelopeSchema = z.looseObject({
  project: z.looseObject({ path_with_namespace: NameSchema }),
});

// `after` is the new head, all zeros for a deleted ref; `checkout_sha` is the commit a branch or
// tag now points at (for an annotated tag, the tagged commit rather than the tag object), null
// for a deleted ref.
const PushSchema = z.looseObject({
  ref: NameSchema,
  after: ShaSchema,
  checkout_sha: z.optional(z.unknown()),
});

const ProjectIdSchema = z.number().check(z.int());

// What a merge request build needs. GitLab sends `oldrev` on an `update` only when the update
// pushed new commits; an update of its title, labels or reviewers has none.
const MergeRequestSchema = z.looseObject({
  object_attributes: z.looseObject({
    iid: PullNumberSchema,
    action: z.nullish(NameSchema),
    target_branch: NameSchema,
    source_project_id: z.nullish(ProjectIdSchema),
    target_project_id: z.nullish(ProjectIdSchema),
    last_commit: z.looseObject({ id: ShaSchema }),
    oldrev: z.optional(z.unknown()),
  }),
});

const MergeRequestCloseSchema = z.looseObject({
  object_attributes: z.looseObject({ iid: PullNumberSchema, action: z.nullish(NameSchema) }),
});

const BUILD_ACTIONS = new Set(['open', 'reopen', 'update']);
const CLOSE_ACTIONS = new Set(['close', 'merge']);

/** Reads a GitLab delivery leniently; `repo` is `project.path_with_namespace`. */
export function parseGitlabWebhook(event: string, payload: unknown): WebhookIntent {
  if (!isPlainObject(payload)) {
    throw new ValidationError([
      { path: '', message: `expected a JSON object, got ${describe(payload)}` },
    ]);
  }
  const issues: ValidationIssue[] = [];
  const envelope = check(EnvelopeSchema, payload, issues);
  const outcome = readEvent(event, payload, issues);
  if (issues.length > 0 || envelope === undefined || outcome === undefined) {
    throw new ValidationError(issues);
  }
  return { ...outcome, repo: envelope.project.path_with_namespace };
}

function readEvent(
  event: string,
  payload: Record<string, unknown>,
  issues: ValidationIssue[],
): Outcome | undefined {
  switch (event) {
    case 'Push Hook':
    case 'Tag Push Hook':
      return readPush(payload, issues);
    case 'Merge Request Hook':
      return readMergeRequest(payload, issues);
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
  if (ZERO_SHA.test(push.after)) return { kind: 'ignore', reason: `deleted ref ${push.ref}` };
  let trigger: 'push' | 'tag';
  if (push.ref.startsWith('refs/heads/')) trigger = 'push';
  else if (push.ref.startsWith('refs/tags/')) trigger = 'tag';
  else return { kind: 'ignore', reason: `push to ${push.ref} is neither a branch nor a tag` };
  const checkout = push.checkout_sha;
  const sha = typeof checkout === 'string' && isCommitSha(checkout) ? checkout : push.after;
  // As on the other forges: a bot's branch is the head of the merge request it is about to
  // open, the default branch and tags are not.
  const defaultBranch = gitlabDefaultBranch(payload);
  const bots =
    trigger === 'push' && push.ref !== (defaultBranch && `refs/heads/${defaultBranch}`)
      ? botLogins([{ username: payload.user_username }])
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

function readMergeRequest(
  payload: Record<string, unknown>,
  issues: ValidationIssue[],
): Outcome | undefined {
  const head = check(MergeRequestCloseSchema, payload, issues);
  if (head === undefined) return undefined;
  const { iid, action } = head.object_attributes;
  if (action && CLOSE_ACTIONS.has(action)) return { kind: 'close_pull_request', pullRequest: iid };
  if (!action || !BUILD_ACTIONS.has(action)) {
    return {
      kind: 'ignore',
      reason: `merge request action ${JSON.stringify(action ?? null)} triggers nothing`,
    };
  }
  const mr = check(MergeRequestSchema, payload, issues)?.object_attributes;
  if (mr === undefined) return undefined;
  if (action === 'update' && (mr.oldrev === undefined || mr.oldrev === null)) {
    return { kind: 'ignore', reason: 'a merge request update without new commits' };
  }
  // Only a branch of the project itself is trusted with secrets: pushing one takes the
  // Developer role, while anyone may open a merge request from a fork. Unknown ids are a fork.
  const sameProject = mr.source_project_id != null && mr.source_project_id === mr.target_project_id;
  const bots = botLogins([payload.user]);
  return {
    kind: 'build',
    trigger: 'pull_request',
    // GitLab keeps every merge request's head under this ref in the target project.
    ref: `refs/merge-requests/${iid}/head`,
    sha: mr.last_commit.id,
    baseRef: mr.target_branch,
    pullRequest: iid,
    trusted: sameProject,
    ...(bots.length > 0 ? { bots } : {}),
  };
}

/** `project.default_branch` of a GitLab payload, when it names a branch. */
export function gitlabDefaultBranch(payload: unknown): string | undefined {
  const project = isPlainObject(payload) ? payload.project : undefined;
  return branchName(isPlainObject(project) ? project.default_branch : undefined);
}
