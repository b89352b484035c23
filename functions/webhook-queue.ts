import middy from '@middy/core';
import type { SQSBatchResponse, SQSEvent } from 'aws-lambda';
import { getContext } from '../lib/context.ts';
import { AppError } from '../lib/errors.ts';
import { forgetBody, messageBody } from '../lib/idle/aws-intake.ts';
import type { DeliveryMessage } from '../lib/idle/intake.ts';
import { log } from '../lib/log.ts';
import { handleDelivery } from '../lib/webhooks.ts';

/**
 * The webhook queue's consumer: each delivery queued while the database was
 * resuming goes through the same handling as a direct one (signature,
 * dedupe, job, compile, statuses). A delivery the contract would refuse (a
 * 4xx: no project, a bad signature) is logged and dropped; any other failure
 * leaves it on the queue for another try, and after five the dead-letter
 * queue (with its alarm) keeps it.
 */
export async function main(event: SQSEvent): Promise<SQSBatchResponse> {
  const ctx = await getContext();
  const bucket = ctx.config.CONDUCTOR_GATE_BUCKET;
  const failures: SQSBatchResponse['batchItemFailures'] = [];
  for (const record of event.Records) {
    let message: DeliveryMessage;
    try {
      message = JSON.parse(record.body) as DeliveryMessage;
    } catch (err) {
      log('error', 'a webhook queue message that is not JSON: dropped', {
        err,
        id: record.messageId,
      });
      continue;
    }
    try {
      const body = await messageBody(message, bucket);
      const { reply } = await handleDelivery(ctx, message.forge, message.headers, body);
      log('info', 'queued webhook delivery handled', { status: reply.status, body: reply.body });
      await forgetBody(message, bucket).catch(() => {});
    } catch (err) {
      if (err instanceof AppError && err.status < 500) {
        log('warn', 'queued webhook delivery refused: dropped', { status: err.status, err });
        await forgetBody(message, bucket).catch(() => {});
        continue;
      }
      log('error', 'queued webhook delivery failed; it stays queued', { err });
      failures.push({ itemIdentifier: record.messageId });
    }
  }
  return { batchItemFailures: failures };
}

export const handler = middy<SQSEvent, SQSBatchResponse>({ timeoutEarlyInMillis: 0 }).handler(main);
