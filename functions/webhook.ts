import { forgeOfRoute, MAX_WEBHOOK_BYTES, receiveWebhook } from '../lib/app/webhook.ts';
import { getContext } from '../lib/context.ts';
import { type HttpEvent, httpFunction, type Reply, rawBody } from '../lib/http/index.ts';

/** POST /v1/webhooks/{forge}: github, gitea, gitlab. */
async function main(event: HttpEvent): Promise<Reply> {
  const forge = forgeOfRoute(event.rawPath);
  // API Gateway's request time: a delivery queued while the database resumed
  // carries it, and superseding goes by it.
  const at = event.requestContext?.timeEpoch;
  const receivedAt = typeof at === 'number' ? new Date(at) : new Date();
  return receiveWebhook(await getContext(), forge, event.headers ?? {}, rawBody(event), receivedAt);
}

export const handler = httpFunction(main, { maxBodyBytes: MAX_WEBHOOK_BYTES });
