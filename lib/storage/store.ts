// The one interface both stores implement: S3 on AWS, a directory on one
// machine. The control plane never moves a byte through it: it hands out
// signed, expiring URLs that the runner and the browser use directly, so its
// CPU per artifact does not grow with the artifact's size.

/** Where the bytes of one upload go: one URL per part, in order. */
export interface UploadPlan {
  /** The multipart upload's id (S3, large files); null for a single PUT. */
  uploadId: string | null;
  parts: Array<{ url: string; size: number }>;
}

/** A store of immutable objects behind signed, expiring URLs. */
export interface BlobStore {
  readonly kind: 'local' | 's3';
  /** Starts an upload of `size` bytes to `key`: a multipart upload's id, or null for a single PUT. */
  createUpload(key: string, size: number): Promise<string | null>;
  /** The URLs the bytes are PUT to (pure: repeating it for a repeated request costs no call). */
  partUrls(key: string, uploadId: string | null, size: number, ttlS: number): Promise<UploadPlan>;
  /** Ends an upload: a multipart upload is completed from its parts' ETags, in order. */
  finishUpload(key: string, uploadId: string | null, etags: string[]): Promise<void>;
  /** The stored object's size in bytes, or null when there is none. */
  size(key: string): Promise<number | null>;
  /** A URL that downloads the object as `filename`, for `ttlS` seconds. */
  downloadUrl(key: string, filename: string, ttlS: number): Promise<string>;
  /**
   * The first `maxBytes` bytes of an object (a test report the control plane
   * reads, lib/app/reports.ts); null when there is none.
   */
  read(key: string, maxBytes: number): Promise<Uint8Array | null>;
  /** Deletes objects; a key that is not there is no error. */
  delete(keys: string[]): Promise<void>;
}

/** How long an upload URL works: long enough for a slow multi-gigabyte part. */
export const UPLOAD_URL_TTL_S = 3600;
/** How long a download URL works once handed out (a redirect is followed at once). */
export const DOWNLOAD_URL_TTL_S = 300;

// Keys are made by the control plane alone (never from a path a user chose),
// so a key can never name a place outside the store.
const KEY = /^[a-z0-9][a-z0-9-]*(\/[a-z0-9][a-z0-9.-]*)*$/;

/** Throws unless `key` is one of the control plane's own keys. */
export function checkKey(key: string): void {
  if (!KEY.test(key) || key.includes('..') || key.length > 512) {
    throw new Error(`not a storage key: ${JSON.stringify(key)}`);
  }
}

/** A Content-Disposition that downloads as `filename`, safe for any name. */
export function attachment(filename: string): string {
  const base = filename.split('/').pop() || 'download';
  const ascii = base.replace(/[^\x20-\x7e]|["\\]/g, '_');
  return `attachment; filename="${ascii}"; filename*=UTF-8''${encodeURIComponent(base)}`;
}
