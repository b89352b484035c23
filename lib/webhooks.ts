// A forge's webhook, checked in the contract's order: size (the middleware),
// headers and payload, project, signature, then what the event asks for.
import { createHash } from 'node:crypto';
import type { AppContext } from './context.ts';
import type { Pool } from './db/index.ts';
import { dispatchCompile } from './dispatch.ts';
import { BadRequestError, NotFoundError, UnauthorizedError } from './errors.ts';
import {
  type ForgeKind,
  parseWebhook,
  readWebhookHeaders,
  verifySignature,
  type WebhookIntent,
} from './forge/webhook.ts';
import type { Reply } from './http/index.ts';
import { findProjectByRepo, type ProjectRow, webhookSecret } from './projects.ts';
import { cancelPullRequest, createJob } from './scheduler/index.ts';
import type { Keyring } from './secrets.ts';
import { deliverJobStatus } from './statuses.ts';

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
 * Handles one delivery; answers the reply, for a new pending job the id to
 * compile, and the jobs whose new commit status to post now (those it
 * cancelled, and a new blocked job, which nothing else would post soon).
 */
/**
 * The checks that need no database, in the contract's order: headers, JSON,
 * the fields the event needs (400). Answers what the rest of the checks use.
 */
export function checkDelivery(
  forge: ForgeKind,
  headers: Record<string, string | undefined>,
  body: Buffer,
): { intent: WebhookIntent; delivery: string; signature: string | undefined } {
  const { event, delivery, signature } = readWebhookHeaders(forge, headers);
  let payload: unknown;
  try {
    payload = JSON.parse(body.toString('utf8'));
  } catch {
    throw new BadRequestError('the body is not valid JSON');
  }
  return { intent: parseWebhook(forge, event, payload), delivery, signature };
}

/** What a delivery that passed the signature check was verified against. */
export interface VerifiedBy {
  projectId: string;
  repo: string;
  /** The project's webhook secret, sealed as in the database. */
  secretEnc: string;
}

export async function receiveWebhook(
  pool: Pool,
  keyring: Keyring,
  forge: ForgeKind,
  headers: Record<string, string | undefined>,
  body: Buffer,
): Promise<{ reply: Reply; compile?: string; statuses?: string[]; verifiedBy?: VerifiedBy }> {
  const { intent, delivery, signature } = checkDelivery(forge, headers, body);
  const project = await findProjectByRepo(pool, forge, intent.repo);
  if (!project) throw new NotFoundError(`no ${forge} project for ${intent.repo}`);
  if (!verifySignature(forge, body, webhookSecret(keyring, project), signature)) {
    throw new UnauthorizedError('the webhook signature is missing or wrong');
  }
  const verifiedBy = {
    projectId: project.id,
    repo: intent.repo,
    secretEnc: project.webhook_secret_enc,
  };
  return { verifiedBy, ...(await afterVerified(pool, project, intent, delivery, body)) };
}

async function afterVerified(
  pool: Pool,
  project: ProjectRow,
  intent: WebhookIntent,
  delivery: string,
  body: Buffer,
): Promise<{ reply: Reply; compile?: string; statuses?: string[] }> {
  if (!project.enabled)
    return { reply: { status: 200, body: { ignored: 'the project is disabled' } } };
  if (intent.kind === 'ignore') return { reply: { status: 200, body: { ignored: intent.reason } } };
  if (intent.kind === 'close_pull_request') {
    const cancelled = await cancelPullRequest(pool, project.id, intent.pullRequest);
    return {
      statuses: cancelled,
      reply: {
        status: 200,
        body: {
          ignored: `pull request #${intent.pullRequest} was closed`,
          cancelled: cancelled.length,
        },
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
      reply: {
        status: 200,
        body: { ignored: `${trust.reason}; the project's fork_pull_requests is ignore` },
      },
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
      reply: {
        status: 200,
        body: { job_id: created.job.id, number: created.job.number, duplicate: true },
      },
    };
  }
  return {
    reply: { status: 202, body: { job_id: created.job.id, number: created.job.number } },
    // A blocked job is compiled once it is approved.
    ...(created.job.state === 'pending' ? { compile: created.job.id } : {}),
    statuses: [...created.superseded, ...(created.job.state === 'blocked' ? [created.job.id] : [])],
  };
}

/**
 * One delivery, start to end: the checks and the job (receiveWebhook), then,
 * after its commit, the compile and the commit statuses it calls for. The
 * webhook function runs this directly; the queue's consumer runs it for a
 * delivery queued while the database was resuming.
 */
export async function handleDelivery(
  ctx: AppContext,
  forge: ForgeKind,
  headers: Record<string, string | undefined>,
  body: Buffer,
): Promise<{ reply: Reply; verifiedBy?: VerifiedBy }> {
  const { reply, compile, statuses, verifiedBy } = await receiveWebhook(
    ctx.pool,
    ctx.keyring,
    forge,
    headers,
    body,
  );
  if (compile) await dispatchCompile(ctx, compile);
  // Jobs this delivery cancelled (superseded, or their pull request closed),
  // and a new job that waits for approval.
  for (const jobId of statuses ?? []) await deliverJobStatus(ctx, jobId);
  return { reply, ...(verifiedBy ? { verifiedBy } : {}) };
}
