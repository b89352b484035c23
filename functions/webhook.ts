import { dispatchCompile } from '../lib/app/dispatch.ts';
import { deliverJobStatus } from '../lib/app/statuses.ts';
import { MAX_WEBHOOK_BYTES, receiveWebhook } from '../lib/app/webhook.ts';
import { getContext } from '../lib/context.ts';
import { type HttpEvent, httpFunction, type Reply, rawBody } from '../lib/http/index.ts';

/** POST /v1/webhooks/github and /v1/webhooks/gitea. */
async function main(event: HttpEvent): Promise<Reply> {
  const ctx = await getContext();
  const forge = event.rawPath.endsWith('/gitea') ? 'gitea' : 'github';
  const { reply, compile, statuses } = await receiveWebhook(
    ctx.pool,
    ctx.keyring,
    forge,
    event.headers ?? {},
    rawBody(event),
  );
  if (compile) await dispatchCompile(ctx, compile);
  // Jobs this delivery cancelled (superseded, or their pull request closed),
  // and a new job that waits for approval.
  for (const jobId of statuses ?? []) await deliverJobStatus(ctx, jobId);
  return reply;
}

export const handler = httpFunction(main, { maxBodyBytes: MAX_WEBHOOK_BYTES });
