// A forge's webhook, checked in the contract's order: size (the middleware),
// headers and payload, project, signature, then what the event asks for.
import type { Pool } from './db/index.ts';
import { BadRequestError, NotFoundError, UnauthorizedError } from './errors.ts';
import {
  type ForgeKind,
  parseWebhook,
  readWebhookHeaders,
  verifySignature,
} from './forge/webhook.ts';
import type { Reply } from './http/index.ts';
import { findProjectByRepo, webhookSecret } from './projects.ts';
import { cancelPullRequest, createJob } from './scheduler/index.ts';
import type { Keyring } from './secrets.ts';

export const MAX_WEBHOOK_BYTES = 5 * 1024 * 1024;

/** Handles one delivery; answers the reply and, for a new job, the id to compile. */
export async function receiveWebhook(
  pool: Pool,
  keyring: Keyring,
  forge: ForgeKind,
  headers: Record<string, string | undefined>,
  body: Buffer,
): Promise<{ reply: Reply; compile?: string; cancelled?: string[] }> {
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
  if (!project.enabled)
    return { reply: { status: 200, body: { ignored: 'the project is disabled' } } };
  if (intent.kind === 'ignore') return { reply: { status: 200, body: { ignored: intent.reason } } };
  if (intent.kind === 'close_pull_request') {
    const cancelled = await cancelPullRequest(pool, project.id, intent.pullRequest);
    return {
      cancelled,
      reply: {
        status: 200,
        body: {
          ignored: `pull request #${intent.pullRequest} was closed`,
          cancelled: cancelled.length,
        },
      },
    };
  }
  const created = await createJob(pool, {
    projectId: project.id,
    ref: intent.ref,
    sha: intent.sha,
    trigger: intent.trigger,
    trusted: intent.trusted,
    pullRequest: intent.pullRequest,
    baseRef: intent.baseRef,
    deliveryId: delivery,
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
    compile: created.job.id,
    cancelled: created.superseded,
  };
}
