// The idle gate's bucket through plain signed requests, reached through the
// VPC's free gateway endpoint. S3 is strongly consistent (read after write,
// and after delete), which the gate's ordering argument relies on. Four plain
// signed requests (lib/aws-sign.ts) instead of the S3 client, which would add
// about 400 KB to every function's bundle.
//
// A missing object answers 404 only to a caller that may list the bucket
// (s3:ListBucket); without it S3 answers 403. infra/stack.ts grants the
// readers ListBucket for that reason.
import { type AwsCredentials, credentialsFromEnv, signedHeaders } from '../aws-sign.ts';
import { type GateStore, OPEN_KEY } from './gate.ts';

/** The marker's key (kept for infra/stack.ts's policies). */
export const GATE_KEY = OPEN_KEY;

type S3Config = AwsCredentials & { region: string; endpoint?: string };

/** The objects of `s3://bucket/`. */
export class S3GateStore implements GateStore {
  readonly bucket: string;
  readonly #config: () => S3Config;
  readonly #timeoutMs: number;
  constructor(bucket: string, config: () => S3Config = credentialsFromEnv, timeoutMs = 2_000) {
    this.bucket = bucket;
    this.#config = config;
    this.#timeoutMs = timeoutMs;
  }

  async #send(
    method: 'HEAD' | 'GET' | 'PUT' | 'DELETE',
    key: string,
    body?: string,
  ): Promise<{ status: number; text: string }> {
    const { endpoint, region, ...credentials } = this.#config();
    const base = new URL(endpoint ?? `https://${this.bucket}.s3.${region}.amazonaws.com`);
    // Keys are ours: letters, digits, '/', '-', '.', '_' only; nothing to encode.
    const path = `/${key}`;
    const headers = signedHeaders({
      method,
      host: base.host,
      path,
      body,
      service: 's3',
      region,
      credentials,
    });
    const res = await fetch(new URL(path, base), {
      method,
      headers,
      body,
      signal: AbortSignal.timeout(this.#timeoutMs),
    });
    const text = await res.text().catch(() => '');
    const missing = res.status === 404 && (method === 'HEAD' || method === 'GET');
    if (!res.ok && !missing) {
      throw new Error(`S3 ${method} s3://${this.bucket}${path}: HTTP ${res.status} ${text}`);
    }
    return { status: res.status, text };
  }

  async exists(key: string) {
    return (await this.#send('HEAD', key)).status !== 404;
  }
  async read(key: string) {
    const { status, text } = await this.#send('GET', key);
    return status === 404 ? undefined : text;
  }
  async write(key: string, body: string) {
    await this.#send('PUT', key, body);
  }
  async remove(key: string) {
    await this.#send('DELETE', key);
  }
}
