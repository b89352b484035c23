// Artifacts: the runner's uploads (upload URLs, then a commit once the bytes
// are in the store), the artifacts a task's needs left it, and what people
// list and download. No byte passes through here: the store's signed URLs
// carry them. Each request is one or two short transactions; the calls to
// the store (S3's multipart start and completion, a size check) happen
// between them, never inside one.
import { randomUUID } from 'node:crypto';
import type { AppContext } from '../context.ts';
import { transaction } from '../db/index.ts';
import { ConflictError, PayloadTooLargeError } from '../errors.ts';
import { log } from '../log.ts';
import { deleteStaleReports } from '../reports/rows.ts';
import {
  type ArtifactRow,
  artifactTotals,
  attemptArtifact,
  type BlobStore,
  DEFAULT_ARTIFACT_EXPIRY_S,
  DOWNLOAD_URL_TTL_S,
  deleteExpiredArtifacts,
  deleteStaleCaches,
  fileTooLarge,
  insertArtifact,
  jobArtifacts,
  leasedTask,
  markArtifactReady,
  neededArtifacts,
  PENDING_UPLOAD_S,
  projectTooLarge,
  readyArtifact,
  type StorageLimits,
  setArtifactUploadId,
  storeFor,
  taskTooLarge,
  UPLOAD_URL_TTL_S,
  type UploadPlan,
} from '../storage/index.ts';
import * as z from '../zod.ts';

/** The store of this deployment: the context's, else S3 when a bucket is configured, else a local directory. */
export function storeOf(ctx: AppContext): BlobStore {
  return storeFor(ctx.storage, ctx.config, ctx.keyring);
}

/** The configured limits on artifacts and caches. */
export function storageLimits(ctx: AppContext): StorageLimits {
  return {
    fileMaxBytes: ctx.config.CONDUCTOR_ARTIFACT_FILE_MAX_BYTES,
    taskMaxBytes: ctx.config.CONDUCTOR_ARTIFACT_TASK_MAX_BYTES,
    projectMaxBytes: ctx.config.CONDUCTOR_ARTIFACT_PROJECT_MAX_BYTES,
    cacheQuotaBytes: ctx.config.CONDUCTOR_CACHE_QUOTA_BYTES,
  };
}

const LeaseId = z.uuid({ message: 'must be a lease id' });
const Sha256 = z.string().check(z.regex(/^[0-9a-f]{64}$/, 'must be 64 lowercase hex digits'));
// A path as it appears in a download's name and a listing: relative, one line.
const ArtifactPath = z.string().check(
  z.minLength(1),
  z.maxLength(1024),
  z.regex(/^[^\0\n\r/][^\0\n\r]*$/, 'must be a relative path on one line'),
  z.refine((p) => !p.split('/').includes('..'), 'must not contain ".."'),
);
const Size = z.number().check(z.int(), z.gte(0), z.lte(2 ** 50));

export const ArtifactBeginSchema = z.strictObject({
  lease_id: LeaseId,
  path: ArtifactPath,
  kind: z.enum(['file', 'tar']),
  size: Size,
  sha256: Sha256,
  /** A tar's largest file, for the per-file limit. */
  largest: z.optional(z.strictObject({ path: ArtifactPath, size: Size })),
});
export type ArtifactBegin = z.infer<typeof ArtifactBeginSchema>;

export const CommitSchema = z.strictObject({
  lease_id: LeaseId,
  /** A multipart upload's parts' ETags, in order. */
  etags: z._default(
    z.array(z.string().check(z.minLength(1), z.maxLength(200))).check(z.maxLength(10_000)),
    [],
  ),
});
export type Commit = z.infer<typeof CommitSchema>;

export const LeaseSchema = z.strictObject({ lease_id: LeaseId });

/** An artifact as the API lists it. */
export interface ArtifactView {
  id: string;
  task_id: string;
  task_name: string;
  path: string;
  kind: 'file' | 'tar';
  size: number;
  sha256: string;
  created_at: Date;
  expires_at: Date;
}

export function artifactView(row: ArtifactRow): ArtifactView {
  return {
    id: row.id,
    task_id: row.task_id,
    task_name: row.task_name,
    path: row.path,
    kind: row.kind,
    size: row.size,
    sha256: row.sha256,
    created_at: row.created_at,
    expires_at: row.expires_at,
  };
}

/**
 * Starts an upload of one artifact by the attempt the worker holds: the
 * limits are checked (413 naming the limit) and the row recorded pending,
 * then the store's upload URLs are answered. Repeating the request answers
 * the same artifact and URLs for the same upload.
 */
export async function beginArtifact(
  ctx: AppContext,
  workerId: string,
  taskId: string,
  body: ArtifactBegin,
): Promise<{
  artifact: ArtifactView;
  upload: { upload_id: string | null; parts: UploadPlan['parts'] };
}> {
  const limits = storageLimits(ctx);
  const store = storeOf(ctx);
  const row = await transaction(
    ctx.pool,
    async (tx) => {
      const task = await leasedTask(tx, taskId, body.lease_id, workerId);
      const largest = body.kind === 'file' ? { path: body.path, size: body.size } : body.largest;
      if (largest && largest.size > limits.fileMaxBytes) {
        throw new PayloadTooLargeError(
          fileTooLarge(largest.path, largest.size, limits.fileMaxBytes),
        );
      }
      if (body.kind === 'file' && body.size > limits.fileMaxBytes) {
        throw new PayloadTooLargeError(fileTooLarge(body.path, body.size, limits.fileMaxBytes));
      }
      const totals = await artifactTotals(tx, task, body.path);
      if (totals.task + body.size > limits.taskMaxBytes) {
        throw new PayloadTooLargeError(taskTooLarge(totals.task + body.size, limits.taskMaxBytes));
      }
      if (totals.project + body.size > limits.projectMaxBytes) {
        throw new PayloadTooLargeError(
          projectTooLarge(totals.project + body.size, limits.projectMaxBytes),
        );
      }
      const key = `artifacts/${task.project_id}/${task.job_id}/${randomUUID()}`;
      const expireInS = task.storage.artifacts?.expireInS ?? DEFAULT_ARTIFACT_EXPIRY_S;
      return insertArtifact(tx, task, body, key, expireInS);
    },
    // Read committed: the sums are read after the project's row is locked,
    // so they see what an upload that held the lock before committed; a
    // repeatable-read snapshot, taken at the first statement, would not
    // (test/e2e/artifacts-routes.test.ts forces both orders).
    { isolation: 'read committed' },
  );
  if (row.state === 'ready') throw new ConflictError(`artifact "${row.path}" is already uploaded`);
  let uploadId = row.upload_id;
  if (uploadId === null) {
    const created = await store.createUpload(row.storage_key, row.size);
    if (created !== null) {
      uploadId = await transaction(ctx.pool, (tx) => setArtifactUploadId(tx, row.id, created));
    }
  }
  const plan = await store.partUrls(row.storage_key, uploadId, row.size, UPLOAD_URL_TTL_S);
  return { artifact: artifactView(row), upload: { upload_id: plan.uploadId, parts: plan.parts } };
}

/**
 * Commits an uploaded artifact: a multipart upload is completed, the stored
 * size must be the one declared (a 409 otherwise, and the artifact stays
 * pending), and the artifact is listed from then on. Repeating it answers
 * the same.
 */
export async function commitArtifact(
  ctx: AppContext,
  workerId: string,
  taskId: string,
  artifactId: string,
  body: Commit,
): Promise<{ artifact: ArtifactView }> {
  const store = storeOf(ctx);
  const row = await transaction(ctx.pool, async (tx) => {
    const task = await leasedTask(tx, taskId, body.lease_id, workerId);
    return attemptArtifact(tx, task, artifactId);
  });
  if (row.state === 'ready') return { artifact: artifactView(row) };
  await finishAndCheck(
    store,
    row.storage_key,
    row.upload_id,
    body.etags,
    row.size,
    `artifact "${row.path}"`,
  );
  await transaction(ctx.pool, async (tx) => {
    await leasedTask(tx, taskId, body.lease_id, workerId);
    await markArtifactReady(tx, row.id);
  });
  return { artifact: artifactView({ ...row, state: 'ready' }) };
}

/** Completes an upload and checks the stored size against the declared one. */
export async function finishAndCheck(
  store: BlobStore,
  key: string,
  uploadId: string | null,
  etags: string[],
  size: number,
  what: string,
): Promise<void> {
  let stored = await store.size(key);
  if (stored === null && uploadId !== null) {
    await store.finishUpload(key, uploadId, etags);
    stored = await store.size(key);
  }
  if (stored === null) throw new ConflictError(`${what} was not uploaded`);
  if (stored !== size) {
    throw new ConflictError(`${what} was declared as ${size} bytes but ${stored} were uploaded`);
  }
}

/** One artifact a needed task left, with a URL to download it. */
export interface NeededArtifact {
  task_name: string;
  path: string;
  kind: 'file' | 'tar';
  size: number;
  sha256: string;
  url: string;
}

/** The artifacts of the tasks the attempt's task needs, with download URLs. */
export async function neededArtifactsFor(
  ctx: AppContext,
  workerId: string,
  taskId: string,
  leaseId: string,
): Promise<{ artifacts: NeededArtifact[] }> {
  const rows = await transaction(ctx.pool, async (tx) => {
    const task = await leasedTask(tx, taskId, leaseId, workerId);
    return neededArtifacts(tx, task);
  });
  const store = storeOf(ctx);
  const artifacts: NeededArtifact[] = [];
  for (const row of rows) {
    artifacts.push({
      task_name: row.task_name,
      path: row.path,
      kind: row.kind,
      size: row.size,
      sha256: row.sha256,
      // Long enough for a large download to start however many come before it.
      url: await store.downloadUrl(row.storage_key, row.path, UPLOAD_URL_TTL_S),
    });
  }
  return { artifacts };
}

/** A job's artifacts (a 404 for a job that does not exist). */
export async function listJobArtifacts(
  ctx: AppContext,
  jobId: string,
): Promise<{ artifacts: ArtifactView[] }> {
  return { artifacts: (await jobArtifacts(ctx.pool, jobId)).map(artifactView) };
}

/** A short-lived URL that downloads the artifact itself, named after its path. */
export async function artifactDownloadUrl(ctx: AppContext, artifactId: string): Promise<string> {
  const row = await readyArtifact(ctx.pool, artifactId);
  return storeOf(ctx).downloadUrl(row.storage_key, row.path, DOWNLOAD_URL_TTL_S);
}

/**
 * Retention for the store (the sweep): expired artifacts and uploads never
 * committed are deleted, rows first in a short transaction, then their
 * objects; a bounded amount per call.
 */
export async function purgeStorage(
  ctx: AppContext,
  batch = 500,
): Promise<{ artifacts_purged: number; caches_purged: number; reports_purged: number }> {
  const artifacts = await transaction(
    ctx.pool,
    (tx) => deleteExpiredArtifacts(tx, batch, PENDING_UPLOAD_S),
    { isolation: 'read committed' },
  );
  const caches = await transaction(
    ctx.pool,
    (tx) => deleteStaleCaches(tx, batch, PENDING_UPLOAD_S, ctx.config.CONDUCTOR_RETENTION_LOG_DAYS),
    { isolation: 'read committed' },
  );
  // Test reports are deleted once read; one whose upload never committed (a runner that died) goes here.
  const reports = await transaction(
    ctx.pool,
    (tx) => deleteStaleReports(tx, PENDING_UPLOAD_S, batch),
    { isolation: 'read committed' },
  );
  const keys = [...artifacts, ...caches, ...reports];
  if (keys.length > 0) {
    try {
      await storeOf(ctx).delete(keys);
    } catch (err) {
      // The rows are gone: on S3 the bucket's lifecycle rule removes what is left.
      log('warn', 'retention could not delete stored objects', { count: keys.length, err });
    }
  }
  return {
    artifacts_purged: artifacts.length,
    caches_purged: caches.length,
    reports_purged: reports.length,
  };
}
