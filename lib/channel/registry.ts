// The push channel's connection registry (issue #52), kept outside the
// database: one object per open WebSocket connection in the idle gate's
// bucket (`channel/<connection id>.json`, the ticket's scope), written by
// $connect, deleted by $disconnect or when a post finds the connection gone.
// Listing it and posting a hint touches S3 and API Gateway only, so neither
// an idle runner's socket nor its connect ever opens a database connection.
import { type AwsCredentials, credentialsFromEnv, signedHeaders, uriEncode } from '../aws-sign.ts';
import type { TicketScope } from './ticket.ts';

export const CHANNEL_PREFIX = 'channel/';

/** One open connection and its runner's scope. */
export interface Connection {
  id: string;
  scope: TicketScope;
}

/** Where connections are kept. */
export interface ConnectionRegistry {
  add(c: Connection): Promise<void>;
  remove(id: string): Promise<void>;
  list(): Promise<Connection[]>;
}

type S3Config = AwsCredentials & { region: string; endpoint?: string };

// API Gateway's connection ids are base64-ish ("L0SM9cOFvHcCIhw="): a key
// keeps only what S3 keys and URLs carry plainly.
const CONNECTION_ID = /^[A-Za-z0-9+/=_-]{1,128}$/;
const keyOf = (id: string) =>
  `${CHANNEL_PREFIX}${Buffer.from(id, 'utf8').toString('base64url')}.json`;
// The most connections one hint reaches (a registry that grew past it is
// listed a page at a time by the next hint: a hint is never a promise).
const MAX_LISTED = 1_000;

/** The registry in an S3 bucket, through plain signed requests (as the gate's marker). */
export class S3ConnectionRegistry implements ConnectionRegistry {
  constructor(
    readonly bucket: string,
    private readonly config: () => S3Config = credentialsFromEnv,
    private readonly timeoutMs = 2_000,
  ) {}

  private async send(
    method: 'GET' | 'PUT' | 'DELETE',
    key: string,
    opts: { body?: string; query?: Record<string, string> } = {},
  ): Promise<{ status: number; text: string }> {
    const { endpoint, region, ...credentials } = this.config();
    const base = new URL(endpoint ?? `https://${this.bucket}.s3.${region}.amazonaws.com`);
    // Path-style when an endpoint is given (s3rver, a VPC endpoint URL), as the gate's store.
    const path = `${endpoint ? `/${this.bucket}` : ''}/${key}`;
    const query = Object.keys(opts.query ?? {})
      .sort()
      .map((k) => `${uriEncode(k)}=${uriEncode(opts.query![k]!)}`)
      .join('&');
    const headers = signedHeaders({
      method,
      host: base.host,
      path,
      query,
      body: opts.body,
      service: 's3',
      region,
      credentials,
    });
    const res = await fetch(new URL(`${path}${query ? `?${query}` : ''}`, base), {
      method,
      headers,
      body: opts.body,
      signal: AbortSignal.timeout(this.timeoutMs),
    });
    const text = await res.text().catch(() => '');
    if (!res.ok && !(res.status === 404 && method !== 'PUT')) {
      throw new Error(
        `S3 ${method} s3://${this.bucket}/${key}: HTTP ${res.status} ${text.slice(0, 300)}`,
      );
    }
    return { status: res.status, text };
  }

  async add(c: Connection): Promise<void> {
    if (!CONNECTION_ID.test(c.id)) throw new Error('not a connection id');
    await this.send('PUT', keyOf(c.id), { body: JSON.stringify(c) });
  }

  async remove(id: string): Promise<void> {
    await this.send('DELETE', keyOf(id));
  }

  async list(): Promise<Connection[]> {
    const { text } = await this.send('GET', '', {
      query: { 'list-type': '2', prefix: CHANNEL_PREFIX, 'max-keys': String(MAX_LISTED) },
    });
    const keys = [...text.matchAll(/<Key>([^<]+)<\/Key>/g)].map((m) => m[1]!);
    // An entry listed and then deleted (its socket closed meanwhile) answers
    // 404, or 403 to a reader S3 does not let list that very key: gone, and
    // the other connections still get their hint. Only when every read fails
    // is the listing a failure (a reader that may read none of them).
    const failures: unknown[] = [];
    const found = await Promise.all(
      keys.map(async (key) => {
        let read: { status: number; text: string };
        try {
          read = await this.send('GET', key);
        } catch (err) {
          failures.push(err);
          return undefined;
        }
        if (read.status === 404) return undefined;
        try {
          return JSON.parse(read.text) as Connection;
        } catch {
          return undefined;
        }
      }),
    );
    if (keys.length > 0 && failures.length === keys.length) throw failures[0];
    return found.filter((c): c is Connection => c !== undefined);
  }
}

/** The registry in memory (one process: tests of the use cases). */
export class MemoryConnectionRegistry implements ConnectionRegistry {
  readonly connections = new Map<string, Connection>();
  async add(c: Connection) {
    this.connections.set(c.id, c);
  }
  async remove(id: string) {
    this.connections.delete(id);
  }
  async list() {
    return [...this.connections.values()];
  }
}
