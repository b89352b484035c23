// The idle gate's marker as an S3 object, reached through the VPC's free
// gateway endpoint. S3 is strongly consistent (read after write, and after
// delete), which the gate's ordering argument relies on.
import {
  DeleteObjectCommand,
  HeadObjectCommand,
  PutObjectCommand,
  S3Client,
  S3ServiceException,
} from '@aws-sdk/client-s3';
import type { GateStore } from './gate.ts';

export const GATE_KEY = 'gate/open';

/** The marker `s3://bucket/gate/open`. */
export class S3GateStore implements GateStore {
  readonly bucket: string;
  readonly client: S3Client;
  constructor(bucket: string, client = new S3Client({})) {
    this.bucket = bucket;
    this.client = client;
  }
  async isOpen() {
    try {
      await this.client.send(new HeadObjectCommand({ Bucket: this.bucket, Key: GATE_KEY }));
      return true;
    } catch (err) {
      if (err instanceof S3ServiceException && err.$metadata.httpStatusCode === 404) return false;
      throw err;
    }
  }
  async open() {
    await this.client.send(
      new PutObjectCommand({ Bucket: this.bucket, Key: GATE_KEY, Body: new Date().toISOString() }),
    );
  }
  async close() {
    await this.client.send(new DeleteObjectCommand({ Bucket: this.bucket, Key: GATE_KEY }));
  }
}
