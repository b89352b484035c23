import middy from '@middy/core';
import type { Context } from 'aws-lambda';
import { type DeliveryMessage, handleQueuedDelivery } from '../lib/app/webhook.ts';
import { getContext } from '../lib/context.ts';

/**
 * The webhook queue's consumer: each async invocation (from the webhook
 * function, lib/idle/aws-intake.ts) is one delivery queued while the database
 * was resuming, handled by lib/app/webhook.ts. One that must be tried again
 * throws: Lambda retries the invocation twice, then hands it to the
 * dead-letter queue.
 */
export async function main(message: DeliveryMessage, context?: Partial<Context>): Promise<void> {
  const ctx = await getContext();
  const record = { messageId: context?.awsRequestId ?? 'local', body: JSON.stringify(message) };
  if (!(await handleQueuedDelivery(ctx, record))) {
    throw new Error('a queued webhook delivery failed; Lambda tries it again');
  }
}

export const handler = middy<DeliveryMessage, void>({ timeoutEarlyInMillis: 0 }).handler(main);
