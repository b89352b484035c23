// A forge's webhook, checked in the contract's order: size (the middleware),
// headers and payload, project, signature, then what the event asks for.
import { createHash } from 'node:crypto';
import type { AppContext } from '../context.ts';
import { BadRequestError, NotFoundError, UnauthorizedError } from '../errors.ts';
import {
  type ForgeKind,
  parseWebhook,
  readWebhookHeaders,
  verifySignature,
  type WebhookIntent,
} from '../forge/webhook.ts';
import type { Reply } from '../http/index.ts';
import { cancelPullRequest, createJob } from '../scheduler/index.ts';
import { findProjectByRepo, type ProjectRow, webhookSecret } from './projects.ts';
import { deliverJobStatus } from './statuses.ts';
import { triggerJob } from './trigger.ts';

export const MAX_WEBHOOK_BYTES = 5 * 1024 * 1024;

/** A build's trust as the webhook can tell it. */
interface WebhookTrust {
  trusted: boolean;
  /** Logins the compile must confirm as writers first (the job starts untrusted). */
  confirmWriters: string[];
  reason: string;
}

/**
 * How far a build can be trusted from its delivery alone. A push and a
 * pull request from a branch of a GitHub repository are trusted; a fork's is
 * not; a Gitea pull request from the repository itself waits for the compile
 * to confirm its people as writers, which takes the project's forge token and
 * Gitea's URL (without them it is untrusted).
 */
export function webhookTrust(
  intent: Extract<WebhookIntent, { kind: 'build' }>,
  project: Pick<ProjectRow, 'repo' | 'forge_url' | 'forge_token_enc'>,
): WebhookTrust {
  if (intent.trigger !== 'pull_request') {
    const what = intent.trigger === 'tag' ? 'a tag pushed' : 'a push';
    return { trusted: true, confirmWriters: [], reason: `${what} to the repository` };
  }
  if (intent.trusted) {
    return {
      trusted: true,
      confirmWriters: [],
      reason: 'a pull request from a branch of the repository',
    };
  }
  const logins = intent.confirmWriters;
  if (logins === undefined) {
    return { trusted: false, confirmWriters: [], reason: 'a pull request from a fork' };
  }
  const who = logins.join(' and ');
  if (logins.length === 0) {
    return {
      trusted: false,
      confirmWriters: [],
      reason: 'a pull request from the repository itself that names nobody for Gitea to confirm',
    };
  }
  if (project.forge_token_enc === null || !project.forge_url) {
    return {
      trusted: false,
      confirmWriters: [],
      reason: `a pull request from the repository itself, which anyone who can read it may open: without a forge token and forge_url Gitea cannot confirm that ${who} may write`,
    };
  }
  return {
    trusted: false,
    confirmWriters: logins,
    reason: `waiting for Gitea to confirm that ${who} may write to ${project.repo}`,
  };
}

/**
 * Handles one delivery and answers the reply. A new job is set on its way
 * (triggerJob: its compile dispatched, or its status posted when it waits for
 * approval); the jobs the delivery cancelled (superseded, or their pull
 * request closed) have their new statuses posted.
 */
export async function receiveWebhook(
  ctx: AppContext,
  forge: ForgeKind,
  headers: Record<string, string | undefined>,
  body: Buffer,
): Promise<Reply> {
  const { pool, keyring } = ctx;
  const { event, delivery, signature } = readWebhookHeaders(forge, headers);
  let payload: unknown;
  try {
    payload = JSON.parse(body.toString('utf8'));
  } catch {
    throw new BadRequestError('the body is not valid JSON');
  }
  const intent = parseWebhook(forge, event, payload);
  const project = await findProjectByRepo(pool, forge, intent.repo);
  if (!project) throw new NotFoundError(`no ${forge} project for ${intent.repo}`);
  if (!verifySignature(forge, body, webhookSecret(keyring, project), signature)) {
    throw new UnauthorizedError('the webhook signature is missing or wrong');
  }
  if (!project.enabled) return { status: 200, body: { ignored: 'the project is disabled' } };
  if (intent.kind === 'ignore') return { status: 200, body: { ignored: intent.reason } };
  if (intent.kind === 'close_pull_request') {
    const cancelled = await cancelPullRequest(pool, project.id, intent.pullRequest);
    for (const jobId of cancelled) await deliverJobStatus(ctx, jobId);
    return {
      status: 200,
      body: {
        ignored: `pull request #${intent.pullRequest} was closed`,
        cancelled: cancelled.length,
      },
    };
  }
  const trust = webhookTrust(intent, project);
  // Untrusted for certain (nothing left to confirm): the project says what
  // becomes of it. A job still to be confirmed is created pending, and the
  // compile applies the same setting once Gitea has answered.
  const untrusted = !trust.trusted && trust.confirmWriters.length === 0;
  if (untrusted && project.fork_pull_requests === 'ignore') {
    return {
      status: 200,
      body: { ignored: `${trust.reason}; the project's fork_pull_requests is ignore` },
    };
  }
  const created = await createJob(pool, {
    projectId: project.id,
    ref: intent.ref,
    sha: intent.sha,
    trigger: intent.trigger,
    trusted: trust.trusted,
    confirmWriters: trust.confirmWriters,
    trustReason: trust.reason,
    blocked: untrusted && project.fork_pull_requests === 'approve',
    pullRequest: intent.pullRequest,
    baseRef: intent.baseRef,
    deliveryId: delivery,
    // The signature covers the body, not the delivery id: a signed body
    // accepted before is answered as a duplicate whatever id it comes with.
    bodySha256: createHash('sha256').update(body).digest(),
  });
  if (created.duplicate) {
    return {
      status: 200,
      body: { job_id: created.job.id, number: created.job.number, duplicate: true },
    };
  }
  // A blocked job is compiled once it is approved.
  await triggerJob(ctx, created.job, created.superseded);
  return { status: 202, body: { job_id: created.job.id, number: created.job.number } };
}
