// The webhook intake on AWS: the queue is Lambda's own queue of async
// invocations of the consumer (webhookQueue: retried twice, then kept in the
// dead-letter queue), which costs nothing while nothing is queued, unlike an
// SQS queue's poller; S3 (the idle gate's bucket) holds the directory and
// bodies too large for an invocation. The clients are the runtime's SDK,
// loaded by the first call that needs them (docs/architecture.md, "Bundles").
import { randomUUID } from 'node:crypto';
import type { LambdaClient } from '@aws-sdk/client-lambda';
import type { S3Client } from '@aws-sdk/client-s3';
import type { ForgeKind } from '../forge/webhook.ts';
import {
  type DeliveryMessage,
  type DirectoryEntry,
  directoryKey,
  type QueuedDelivery,
  type WebhookIntake,
} from './intake.ts';

const s3Sdk = () => import('@aws-sdk/client-s3');
const lambdaSdk = () => import('@aws-sdk/client-lambda');

// An async invocation takes 256 KiB; base64 grows a body by a third, and
// the headers come along.
const INLINE_BODY_BYTES = 150 * 1024;
export const DELIVERY_PREFIX = 'deliveries/';

/** Async invocations of the consumer function and S3 behind the intake's interfaces. */
export function awsIntake(consumerFunction: string, bucket: string): WebhookIntake {
  let clients: Promise<{ s3: S3Client; lambda: LambdaClient }> | undefined;
  const sdk = () => {
    clients ??= Promise.all([s3Sdk(), lambdaSdk()]).then(([s3, lambda]) => ({
      s3: new s3.S3Client({}),
      lambda: new lambda.LambdaClient({}),
    }));
    return clients;
  };
  return {
    queue: {
      async send(d: QueuedDelivery) {
        const [{ s3, lambda }, { PutObjectCommand }, { InvokeCommand }] = await Promise.all([
          sdk(),
          s3Sdk(),
          lambdaSdk(),
        ]);
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
        await lambda.send(
          new InvokeCommand({
            FunctionName: consumerFunction,
            InvocationType: 'Event',
            Payload: Buffer.from(JSON.stringify(message)),
          }),
        );
      },
    },
    directory: {
      async get(forge: ForgeKind, repo: string) {
        const [{ s3 }, { GetObjectCommand, NoSuchKey }] = await Promise.all([sdk(), s3Sdk()]);
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
        const [{ s3 }, { PutObjectCommand }] = await Promise.all([sdk(), s3Sdk()]);
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
  client?: S3Client,
): Promise<Buffer> {
  if (message.body !== undefined) return Buffer.from(message.body, 'base64');
  if (!message.bodyKey || !bucket) throw new Error('a queued delivery without a body');
  const { S3Client, GetObjectCommand } = await s3Sdk();
  const s3 = client ?? new S3Client({});
  const got = await s3.send(new GetObjectCommand({ Bucket: bucket, Key: message.bodyKey }));
  return Buffer.from(await got.Body!.transformToByteArray());
}

/** Deletes a handled delivery's body from S3 (the bucket's lifecycle rule is the backstop). */
export async function forgetBody(
  message: DeliveryMessage,
  bucket: string | undefined,
  client?: S3Client,
): Promise<void> {
  if (message.bodyKey && bucket) {
    const { S3Client, DeleteObjectCommand } = await s3Sdk();
    const s3 = client ?? new S3Client({});
    await s3.send(new DeleteObjectCommand({ Bucket: bucket, Key: message.bodyKey }));
  }
}
