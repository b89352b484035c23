// The webhook intake on AWS: SQS for the queue, S3 (the idle gate's bucket)
// for the directory and for bodies too large for a queue message.
import { randomUUID } from 'node:crypto';
import {
  DeleteObjectCommand,
  GetObjectCommand,
  NoSuchKey,
  PutObjectCommand,
  S3Client,
} from '@aws-sdk/client-s3';
import { SendMessageCommand, SQSClient } from '@aws-sdk/client-sqs';
import type { ForgeKind } from '../forge/webhook.ts';
import {
  type DeliveryMessage,
  type DirectoryEntry,
  directoryKey,
  type QueuedDelivery,
  type WebhookIntake,
} from './intake.ts';

// SQS takes 256 KiB a message; base64 grows a body by a third, and the
// headers come along.
const INLINE_BODY_BYTES = 150 * 1024;
export const DELIVERY_PREFIX = 'deliveries/';

/** SQS and S3 behind the intake's interfaces. */
export function awsIntake(queueUrl: string, bucket: string): WebhookIntake {
  const s3 = new S3Client({});
  const sqs = new SQSClient({});
  return {
    queue: {
      async send(d: QueuedDelivery) {
        const message: DeliveryMessage = {
          forge: d.forge,
          headers: d.headers,
          ...(d.receivedAt ? { receivedAt: d.receivedAt.toISOString() } : {}),
        };
        if (d.body.length > INLINE_BODY_BYTES) {
          message.bodyKey = `${DELIVERY_PREFIX}${randomUUID()}`;
          await s3.send(
            new PutObjectCommand({ Bucket: bucket, Key: message.bodyKey, Body: d.body }),
          );
        } else {
          message.body = d.body.toString('base64');
        }
        await sqs.send(
          new SendMessageCommand({ QueueUrl: queueUrl, MessageBody: JSON.stringify(message) }),
        );
      },
    },
    directory: {
      async get(forge: ForgeKind, repo: string) {
        try {
          const got = await s3.send(
            new GetObjectCommand({ Bucket: bucket, Key: directoryKey(forge, repo) }),
          );
          return JSON.parse(await got.Body!.transformToString()) as DirectoryEntry;
        } catch (err) {
          if (err instanceof NoSuchKey) return undefined;
          throw err;
        }
      },
      async put(forge: ForgeKind, entry: DirectoryEntry) {
        await s3.send(
          new PutObjectCommand({
            Bucket: bucket,
            Key: directoryKey(forge, entry.repo),
            Body: JSON.stringify(entry),
          }),
        );
      },
    },
  };
}

/** Reads a queued message's body (from S3 when it was too large to queue). */
export async function messageBody(
  message: DeliveryMessage,
  bucket: string | undefined,
  s3 = new S3Client({}),
): Promise<Buffer> {
  if (message.body !== undefined) return Buffer.from(message.body, 'base64');
  if (!message.bodyKey || !bucket) throw new Error('a queued delivery without a body');
  const got = await s3.send(new GetObjectCommand({ Bucket: bucket, Key: message.bodyKey }));
  return Buffer.from(await got.Body!.transformToByteArray());
}

/** Deletes a handled delivery's body from S3 (the bucket's lifecycle rule is the backstop). */
export async function forgetBody(
  message: DeliveryMessage,
  bucket: string | undefined,
  s3 = new S3Client({}),
): Promise<void> {
  if (message.bodyKey && bucket) {
    await s3.send(new DeleteObjectCommand({ Bucket: bucket, Key: message.bodyKey }));
  }
}
