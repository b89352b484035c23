// The store on AWS: one S3 bucket. The control plane presigns (a local
// computation: no call to S3) and the runner moves the bytes; files over
// one part go up as a multipart upload, a URL per part.
import {
  AbortMultipartUploadCommand,
  CompleteMultipartUploadCommand,
  CreateMultipartUploadCommand,
  DeleteObjectsCommand,
  GetObjectCommand,
  HeadObjectCommand,
  PutObjectCommand,
  S3Client,
  UploadPartCommand,
} from '@aws-sdk/client-s3';
import { getSignedUrl } from '@aws-sdk/s3-request-presigner';
import { attachment, type BlobStore, checkKey, type UploadPlan } from './store.ts';

/** S3's largest part count. */
const MAX_PARTS = 10_000;
/** Parts of 64 MiB: a 10 GiB file is 160 parts. */
export const DEFAULT_PART_BYTES = 64 * 1024 * 1024;

export interface S3StoreOptions {
  bucket: string;
  /** Objects go under this prefix ("" for none). */
  prefix?: string;
  /** A file larger than one part goes up in parts of this size. */
  partBytes?: number;
  client?: S3Client;
}

/** The S3 store. */
export class S3Store implements BlobStore {
  readonly kind = 's3' as const;
  private readonly client: S3Client;
  private readonly bucket: string;
  private readonly prefix: string;
  readonly partBytes: number;

  constructor(opts: S3StoreOptions) {
    this.client = opts.client ?? new S3Client({});
    this.bucket = opts.bucket;
    this.prefix = opts.prefix ?? '';
    this.partBytes = opts.partBytes ?? DEFAULT_PART_BYTES;
  }

  private partSize(size: number): number {
    // Never more than S3's part count, however large the file.
    return Math.max(this.partBytes, Math.ceil(size / MAX_PARTS));
  }

  async createUpload(key: string, size: number): Promise<string | null> {
    checkKey(key);
    if (size <= this.partSize(size)) return null;
    const out = await this.client.send(
      new CreateMultipartUploadCommand({ Bucket: this.bucket, Key: this.prefix + key }),
    );
    if (!out.UploadId) throw new Error('S3 answered no upload id');
    return out.UploadId;
  }

  async partUrls(
    key: string,
    uploadId: string | null,
    size: number,
    ttlS: number,
  ): Promise<UploadPlan> {
    checkKey(key);
    const Key = this.prefix + key;
    if (uploadId === null) {
      const url = await getSignedUrl(
        this.client,
        new PutObjectCommand({ Bucket: this.bucket, Key, ContentLength: size }),
        { expiresIn: ttlS },
      );
      return { uploadId: null, parts: [{ url, size }] };
    }
    const part = this.partSize(size);
    const parts: UploadPlan['parts'] = [];
    for (let n = 0; n * part < size; n++) {
      const bytes = Math.min(part, size - n * part);
      const url = await getSignedUrl(
        this.client,
        new UploadPartCommand({
          Bucket: this.bucket,
          Key,
          UploadId: uploadId,
          PartNumber: n + 1,
          ContentLength: bytes,
        }),
        { expiresIn: ttlS },
      );
      parts.push({ url, size: bytes });
    }
    return { uploadId, parts };
  }

  async finishUpload(key: string, uploadId: string | null, etags: string[]): Promise<void> {
    if (uploadId === null) return;
    await this.client.send(
      new CompleteMultipartUploadCommand({
        Bucket: this.bucket,
        Key: this.prefix + key,
        UploadId: uploadId,
        MultipartUpload: { Parts: etags.map((ETag, i) => ({ ETag, PartNumber: i + 1 })) },
      }),
    );
  }

  /** Gives up a multipart upload, so its parts stop costing storage. */
  async abortUpload(key: string, uploadId: string): Promise<void> {
    await this.client.send(
      new AbortMultipartUploadCommand({
        Bucket: this.bucket,
        Key: this.prefix + key,
        UploadId: uploadId,
      }),
    );
  }

  async size(key: string): Promise<number | null> {
    checkKey(key);
    try {
      const out = await this.client.send(
        new HeadObjectCommand({ Bucket: this.bucket, Key: this.prefix + key }),
      );
      return out.ContentLength ?? null;
    } catch (err) {
      const status = (err as { $metadata?: { httpStatusCode?: number } }).$metadata?.httpStatusCode;
      if (status === 404) return null;
      throw err;
    }
  }

  async read(key: string, maxBytes: number): Promise<Uint8Array | null> {
    checkKey(key);
    try {
      const out = await this.client.send(
        new GetObjectCommand({
          Bucket: this.bucket,
          Key: this.prefix + key,
          Range: `bytes=0-${Math.max(0, maxBytes - 1)}`,
        }),
      );
      const bytes = (await out.Body?.transformToByteArray()) ?? new Uint8Array();
      return bytes.subarray(0, maxBytes);
    } catch (err) {
      const status = (err as { $metadata?: { httpStatusCode?: number } }).$metadata?.httpStatusCode;
      if (status === 404) return null;
      throw err;
    }
  }

  async downloadUrl(key: string, filename: string, ttlS: number): Promise<string> {
    checkKey(key);
    return getSignedUrl(
      this.client,
      new GetObjectCommand({
        Bucket: this.bucket,
        Key: this.prefix + key,
        ResponseContentDisposition: attachment(filename),
      }),
      { expiresIn: ttlS },
    );
  }

  async delete(keys: string[]): Promise<void> {
    // DeleteObjects takes at most 1,000 keys.
    for (let i = 0; i < keys.length; i += 1000) {
      const batch = keys.slice(i, i + 1000);
      for (const key of batch) checkKey(key);
      await this.client.send(
        new DeleteObjectsCommand({
          Bucket: this.bucket,
          Delete: { Objects: batch.map((key) => ({ Key: this.prefix + key })), Quiet: true },
        }),
      );
    }
  }
}
