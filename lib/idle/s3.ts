// The idle gate's marker as an S3 object, reached through the VPC's free
// gateway endpoint. S3 is strongly consistent (read after write, and after
// delete), which the gate's ordering argument relies on. Three plain signed
// requests (lib/aws-sign.ts) instead of the S3 client, which would add about
// 400 KB to every function's bundle.
import { type AwsCredentials, credentialsFromEnv, signedHeaders } from '../aws-sign.ts';
import type { GateStore } from './gate.ts';

export const GATE_KEY = 'gate/open';

/** The marker `s3://bucket/gate/open`. */
export class S3GateStore implements GateStore {
  readonly bucket: string;
  readonly #config: () => AwsCredentials & { region: string; endpoint?: string };
  constructor(
    bucket: string,
    config: () => AwsCredentials & { region: string; endpoint?: string } = credentialsFromEnv,
  ) {
    this.bucket = bucket;
    this.#config = config;
  }

  async #send(method: 'HEAD' | 'PUT' | 'DELETE', body?: string): Promise<Response> {
    const { endpoint, region, ...credentials } = this.#config();
    const base = new URL(endpoint ?? `https://${this.bucket}.s3.${region}.amazonaws.com`);
    const path = `/${GATE_KEY}`;
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
      signal: AbortSignal.timeout(3_000),
    });
    if (!res.ok && !(method === 'HEAD' && res.status === 404)) {
      throw new Error(
        `S3 ${method} s3://${this.bucket}${path}: HTTP ${res.status} ${await res.text()}`,
      );
    }
    await res.arrayBuffer().catch(() => undefined);
    return res;
  }

  async isOpen() {
    return (await this.#send('HEAD')).status !== 404;
  }
  async open() {
    await this.#send('PUT', new Date().toISOString());
  }
  async close() {
    await this.#send('DELETE');
  }
}
