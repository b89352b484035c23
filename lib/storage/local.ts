// The store on one machine (`npm start`): a directory under .conductor/,
// served by the local server behind URLs that the product signs and
// verifies itself (HMAC-SHA256 over the object's key, the method, the
// expiry and, for an upload, the exact size). The runner cannot tell it from
// S3: it PUTs and GETs the URLs it is handed.
import { createHash, createHmac, randomUUID, timingSafeEqual } from 'node:crypto';
import { createReadStream, createWriteStream } from 'node:fs';
import { type FileHandle, mkdir, open, rename, rm, stat } from 'node:fs/promises';
import type { IncomingMessage, ServerResponse } from 'node:http';
import { dirname, join } from 'node:path';
import { pipeline } from 'node:stream/promises';
import { attachment, type BlobStore, checkKey, type UploadPlan } from './store.ts';

/** Where the local store's URLs are served. */
export const BLOB_PATH = '/v1/blobs/';

interface Grant {
  /** The object's key. */
  k: string;
  /** PUT or GET. */
  m: 'PUT' | 'GET';
  /** Expiry, in seconds since the epoch. */
  e: number;
  /** An upload's exact size. */
  n?: number;
  /** A download's file name. */
  f?: string;
}

/** Why a signed URL was refused: the status and the message the caller sees. */
export class GrantError extends Error {
  constructor(
    readonly status: number,
    message: string,
  ) {
    super(message);
  }
}

/** A directory store whose URLs are signed with `key` (derived from the app's sealing key). */
export class LocalStore implements BlobStore {
  readonly kind = 'local' as const;
  private readonly key: Buffer;

  constructor(
    readonly root: string,
    signingKey: Buffer,
    private readonly now: () => number = Date.now,
  ) {
    // A key of its own: a URL's signature says nothing about the sealing key.
    this.key = createHmac('sha256', signingKey).update('conductor blob urls').digest();
  }

  async createUpload(key: string): Promise<null> {
    checkKey(key);
    return null;
  }

  async partUrls(
    key: string,
    _uploadId: string | null,
    size: number,
    ttlS: number,
  ): Promise<UploadPlan> {
    return {
      uploadId: null,
      parts: [{ url: this.sign({ k: key, m: 'PUT', e: this.expiry(ttlS), n: size }), size }],
    };
  }

  async finishUpload(): Promise<void> {}

  async size(key: string): Promise<number | null> {
    checkKey(key);
    try {
      return (await stat(this.file(key))).size;
    } catch {
      return null;
    }
  }

  async read(key: string, maxBytes: number): Promise<Uint8Array | null> {
    checkKey(key);
    let handle: FileHandle;
    try {
      handle = await open(this.file(key), 'r');
    } catch {
      return null;
    }
    try {
      const buffer = Buffer.alloc(maxBytes);
      let filled = 0;
      while (filled < maxBytes) {
        const { bytesRead } = await handle.read(buffer, filled, maxBytes - filled, filled);
        if (bytesRead === 0) break;
        filled += bytesRead;
      }
      return buffer.subarray(0, filled);
    } finally {
      await handle.close();
    }
  }

  async downloadUrl(key: string, filename: string, ttlS: number): Promise<string> {
    return this.sign({ k: key, m: 'GET', e: this.expiry(ttlS), f: filename });
  }

  async delete(keys: string[]): Promise<void> {
    for (const key of keys) {
      checkKey(key);
      await rm(this.file(key), { force: true });
    }
  }

  /** The grant a URL's token carries, if its signature, method and expiry hold. */
  verify(token: string, method: string): Grant {
    const [payload, signature, extra] = token.split('.');
    if (!payload || !signature || extra !== undefined)
      throw new GrantError(403, 'not a signed URL');
    const expected = createHmac('sha256', this.key).update(payload).digest();
    const given = Buffer.from(signature, 'base64url');
    if (given.length !== expected.length || !timingSafeEqual(given, expected)) {
      throw new GrantError(403, 'the URL signature does not match');
    }
    let grant: Grant;
    try {
      grant = JSON.parse(Buffer.from(payload, 'base64url').toString('utf8')) as Grant;
      checkKey(grant.k);
    } catch {
      throw new GrantError(403, 'not a signed URL');
    }
    if (grant.m !== method && !(grant.m === 'GET' && method === 'HEAD')) {
      throw new GrantError(403, `the URL is signed for ${grant.m}, not ${method}`);
    }
    if (grant.e * 1000 < this.now()) throw new GrantError(403, 'the URL has expired');
    return grant;
  }

  /**
   * Serves one request to a signed URL: a PUT streams the body to the
   * object (its size must be the signed one), a GET streams the object.
   * Bytes go from the socket to the disk and back; nothing is buffered.
   */
  async serve(req: IncomingMessage, res: ServerResponse, token: string): Promise<void> {
    const method = (req.method ?? 'GET').toUpperCase();
    let grant: Grant;
    try {
      grant = this.verify(token, method);
    } catch (err) {
      const status = err instanceof GrantError ? err.status : 403;
      req.resume();
      return reply(res, status, (err as Error).message);
    }
    const file = this.file(grant.k);
    if (method === 'PUT') {
      const declared = req.headers['content-length'];
      if (declared !== undefined && Number(declared) !== grant.n) {
        req.resume();
        return reply(res, 400, `the URL is for ${grant.n} bytes, the body has ${declared}`);
      }
      await mkdir(dirname(file), { recursive: true });
      const temp = `${file}.${randomUUID()}.part`;
      let bytes = 0;
      const hash = createHash('sha256');
      const limit = grant.n ?? 0;
      try {
        await pipeline(
          req,
          async function* (source: AsyncIterable<Buffer>) {
            for await (const chunk of source) {
              bytes += chunk.length;
              if (bytes > limit)
                throw new GrantError(413, `the body is over the ${limit} bytes the URL is for`);
              hash.update(chunk);
              yield chunk;
            }
          },
          createWriteStream(temp),
        );
        if (bytes !== limit)
          throw new GrantError(400, `the URL is for ${limit} bytes, the body had ${bytes}`);
        await rename(temp, file);
      } catch (err) {
        await rm(temp, { force: true });
        if (err instanceof GrantError) return reply(res, err.status, err.message);
        throw err;
      }
      res.writeHead(200, { etag: `"${hash.digest('hex')}"`, 'content-length': '0' });
      res.end();
      return;
    }
    let size: number;
    try {
      size = (await stat(file)).size;
    } catch {
      return reply(res, 404, 'no such object');
    }
    const gzip = (grant.f ?? '').endsWith('.tar.gz');
    res.writeHead(200, {
      'content-type': gzip ? 'application/gzip' : 'application/octet-stream',
      'content-length': String(size),
      'content-disposition': attachment(grant.f ?? grant.k),
      'cache-control': 'private, no-store',
    });
    if (method === 'HEAD') {
      res.end();
      return;
    }
    await pipeline(createReadStream(file), res);
  }

  private file(key: string): string {
    checkKey(key);
    return join(this.root, ...key.split('/'));
  }

  private expiry(ttlS: number): number {
    return Math.floor(this.now() / 1000) + ttlS;
  }

  private sign(grant: Grant): string {
    checkKey(grant.k);
    const payload = Buffer.from(JSON.stringify(grant)).toString('base64url');
    const signature = createHmac('sha256', this.key).update(payload).digest('base64url');
    // Relative: the runner resolves it against the control plane's URL, a browser against the page's.
    return `${BLOB_PATH}${payload}.${signature}`;
  }
}

function reply(res: ServerResponse, status: number, message: string): void {
  const body = JSON.stringify({
    error: {
      code:
        status === 413
          ? 'payload_too_large'
          : status === 404
            ? 'not_found'
            : status === 400
              ? 'bad_request'
              : 'forbidden',
      message,
    },
  });
  res.writeHead(status, {
    'content-type': 'application/json',
    'content-length': String(Buffer.byteLength(body)),
  });
  res.end(body);
}
