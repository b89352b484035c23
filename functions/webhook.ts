import { type AppContext, getContext } from '../lib/context.ts';
import type { ForgeKind } from '../lib/forge/webhook.ts';
import { verifySignature } from '../lib/forge/webhook.ts';
import { type HttpEvent, httpFunction, type Reply, rawBody } from '../lib/http/index.ts';
import { awsIntake } from '../lib/idle/aws-intake.ts';
import { databaseAnswers, type WebhookIntake } from '../lib/idle/intake.ts';
import { log } from '../lib/log.ts';
import { type ProjectRow, webhookSecret } from '../lib/projects.ts';
import { checkDelivery, handleDelivery, MAX_WEBHOOK_BYTES } from '../lib/webhooks.ts';

function intakeOf(ctx: AppContext): WebhookIntake | undefined {
  const { CONDUCTOR_WEBHOOK_QUEUE_URL: queue, CONDUCTOR_GATE_BUCKET: bucket } = ctx.config;
  if (!ctx.intake && queue && bucket) ctx.intake = awsIntake(queue, bucket);
  return ctx.intake;
}

// The sealed secret each repository's directory entry was last written with,
// so a delivery writes the entry only when it changed.
const published = new Map<string, string>();

/**
 * POST /v1/webhooks/github and /v1/webhooks/gitea. With a queue configured
 * (deployed), a delivery the database cannot take within
 * CONDUCTOR_WEBHOOK_DB_WAIT_MS is queued if its signature checks against the
 * directory, and answered `202 {"queued": true, "delivery"}`; anything else
 * takes the direct path and every answer of the contract (docs/deploy.md,
 * "Webhooks while the database resumes").
 */
async function main(event: HttpEvent): Promise<Reply> {
  const ctx = await getContext();
  const forge: ForgeKind = event.rawPath.endsWith('/gitea') ? 'gitea' : 'github';
  const headers = event.headers ?? {};
  const body = rawBody(event);
  const intake = intakeOf(ctx);
  if (intake) {
    // 400s first: they need no database.
    const { intent, delivery, signature } = checkDelivery(forge, headers, body);
    if (!(await databaseAnswers(ctx.pool, ctx.config.CONDUCTOR_WEBHOOK_DB_WAIT_MS))) {
      const entry = await intake.directory.get(forge, intent.repo).catch((err) => {
        log('warn', 'could not read the webhook directory', { err });
        return undefined;
      });
      const secret = entry
        ? webhookSecret(ctx.keyring, {
            id: entry.projectId,
            webhook_secret_enc: entry.secretEnc,
          } as ProjectRow)
        : undefined;
      if (secret !== undefined && verifySignature(forge, body, secret, signature)) {
        await intake.queue.send({ forge, headers, body });
        log('info', 'the database did not answer in time: delivery queued', { delivery });
        return { status: 202, body: { queued: true, delivery } };
      }
      // Unknown here, or a secret rotated since: only the database can say
      // 404 or 401, so wait for it (the connect covers a resume).
    }
  }
  const { reply, verifiedBy } = await handleDelivery(ctx, forge, headers, body);
  if (
    intake &&
    verifiedBy &&
    published.get(`${forge} ${verifiedBy.repo}`) !== verifiedBy.secretEnc
  ) {
    await intake.directory
      .put(forge, verifiedBy)
      .then(() => published.set(`${forge} ${verifiedBy.repo}`, verifiedBy.secretEnc))
      .catch((err) => log('warn', 'could not write the webhook directory', { err }));
  }
  return reply;
}

export const handler = httpFunction(main, { maxBodyBytes: MAX_WEBHOOK_BYTES });
