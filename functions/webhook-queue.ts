import middy from '@middy/core';
import type { SQSBatchResponse, SQSEvent } from 'aws-lambda';
import { handleQueuedDelivery } from '../lib/app/webhook.ts';
import { getContext } from '../lib/context.ts';

/**
 * The webhook queue's consumer (SQS, partial batch responses): each message
 * is a delivery queued while the database was resuming, handled by
 * lib/app/webhook.ts; one that must be tried again is reported as failed.
 */
export async function main(event: SQSEvent): Promise<SQSBatchResponse> {
  const ctx = await getContext();
  const failures: SQSBatchResponse['batchItemFailures'] = [];
  for (const record of event.Records) {
    if (!(await handleQueuedDelivery(ctx, record))) {
      failures.push({ itemIdentifier: record.messageId });
    }
  }
  return { batchItemFailures: failures };
}

export const handler = middy<SQSEvent, SQSBatchResponse>({ timeoutEarlyInMillis: 0 }).handler(main);
