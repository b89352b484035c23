// Caches: the runner's restores and saves, and what people list and delete.
// Restores read the job's scopes in order (lib/storage/scope.ts); saves go
// to the job's own scope, an isolated one for untrusted jobs. Entries are
// immutable; a project over its quota evicts entries unused for 7 days
// first, then the least recently used.
import { randomUUID } from 'node:crypto';
import type { AppContext } from '../context.ts';
import { transaction } from '../db/index.ts';
import { NotFoundError } from '../errors.ts';
import { log } from '../log.ts';
import { ADMIN_BEARER, type Person } from '../people/sessions.ts';
import {
  attemptCache,
  type BlobStore,
  CACHE_STALE_S,
  cacheTooLarge,
  deleteCacheKey,
  evictCaches,
  insertCache,
  leasedTask,
  markCacheReady,
  matchCache,
  projectCaches,
  readScopes,
  setCacheUploadId,
  trustedCacheBytes,
  UPLOAD_URL_TTL_S,
  type UploadPlan,
  writeScope,
} from '../storage/index.ts';
import * as z from '../zod.ts';
import { type Commit, finishAndCheck, storageLimits, storeOf } from './artifacts.ts';
import { audit } from './audit.ts';

const LeaseId = z.uuid({ message: 'must be a lease id' });
const CacheKey = z
  .string()
  .check(
    z.minLength(1),
    z.maxLength(512),
    z.regex(/^[^\0\n\r,]*$/, 'must be one line without commas'),
  );

export const CacheRestoreSchema = z.strictObject({
  lease_id: LeaseId,
  key: CacheKey,
  restore_keys: z._default(z.array(CacheKey).check(z.maxLength(20)), []),
});
export type CacheRestore = z.infer<typeof CacheRestoreSchema>;

export const CacheSaveSchema = z.strictObject({
  lease_id: LeaseId,
  key: CacheKey,
  size: z.number().check(z.int(), z.gte(0), z.lte(2 ** 50)),
  sha256: z.string().check(z.regex(/^[0-9a-f]{64}$/, 'must be 64 lowercase hex digits')),
});
export type CacheSave = z.infer<typeof CacheSaveSchema>;

/** What a restore answers the runner. */
export interface RestoreAnswer {
  result: 'hit' | 'restore-key' | 'miss';
  key: string | null;
  size: number;
  /** The entry's SHA-256 (hex) as saved, which the runner checks the download against. */
  sha256: string | null;
  url: string | null;
}

/** Finds the entry a task's restore gets, and a URL to download it. */
export async function restoreCache(
  ctx: AppContext,
  workerId: string,
  taskId: string,
  body: CacheRestore,
): Promise<RestoreAnswer> {
  const match = await transaction(ctx.pool, async (tx) => {
    const task = await leasedTask(tx, taskId, body.lease_id, workerId);
    return matchCache(tx, task, readScopes(task), body.key, body.restore_keys);
  });
  if (!match.entry) return { result: 'miss', key: null, size: 0, sha256: null, url: null };
  const url = await storeOf(ctx).downloadUrl(
    match.entry.storage_key,
    'cache.tar.gz',
    UPLOAD_URL_TTL_S,
  );
  return {
    result: match.result,
    key: match.entry.key,
    size: match.entry.size,
    sha256: match.entry.sha256,
    url,
  };
}

/** What a save answers: where to upload, or why nothing is saved. */
export type SaveAnswer =
  | {
      cache_id: string;
      scope: string;
      upload: { upload_id: string | null; parts: UploadPlan['parts'] };
    }
  | { skipped: string };

/** Starts saving a cache entry in the job's write scope, unless the key is there already. */
export async function saveCache(
  ctx: AppContext,
  workerId: string,
  taskId: string,
  body: CacheSave,
): Promise<SaveAnswer> {
  const limits = storageLimits(ctx);
  const max = Math.min(limits.fileMaxBytes, limits.cacheQuotaBytes);
  const store = storeOf(ctx);
  const saved = await transaction(ctx.pool, async (tx) => {
    const task = await leasedTask(tx, taskId, body.lease_id, workerId);
    if (body.size > max) return { skipped: cacheTooLarge(body.key, body.size, max) };
    if (!task.trusted) {
      const held = await trustedCacheBytes(tx, task.project_id);
      if (held + body.size > limits.cacheQuotaBytes) {
        return {
          skipped: `the project's cache quota (${limits.cacheQuotaBytes} bytes) is held by trusted entries (${held} bytes), which an untrusted job's save never evicts`,
        };
      }
    }
    const key = `caches/${task.project_id}/${randomUUID()}`;
    return insertCache(tx, task, writeScope(task), body.key, body.size, body.sha256, key);
  });
  if ('skipped' in saved) return saved;
  const entry = saved.entry;
  let uploadId = entry.upload_id;
  if (uploadId === null) {
    const created = await store.createUpload(entry.storage_key, entry.size);
    if (created !== null) {
      uploadId = await transaction(ctx.pool, (tx) => setCacheUploadId(tx, entry.id, created));
    }
  }
  const plan = await store.partUrls(entry.storage_key, uploadId, entry.size, UPLOAD_URL_TTL_S);
  return {
    cache_id: entry.id,
    scope: entry.scope,
    upload: { upload_id: plan.uploadId, parts: plan.parts },
  };
}

/** Commits a saved cache entry, then brings the project within its quota. */
export async function commitCache(
  ctx: AppContext,
  workerId: string,
  taskId: string,
  cacheId: string,
  body: Commit,
): Promise<{ key: string; scope: string; size: number; evicted?: true }> {
  const store = storeOf(ctx);
  const entry = await transaction(ctx.pool, async (tx) => {
    const task = await leasedTask(tx, taskId, body.lease_id, workerId);
    return attemptCache(tx, task, cacheId);
  });
  if (entry.state === 'pending') {
    await finishAndCheck(
      store,
      entry.storage_key,
      entry.upload_id,
      body.etags,
      entry.size,
      `cache "${entry.key}"`,
    );
    const evicted = await transaction(ctx.pool, async (tx) => {
      await leasedTask(tx, taskId, body.lease_id, workerId);
      await markCacheReady(tx, entry.id);
      // An untrusted job's entry makes room among untrusted entries only,
      // itself included (evictCaches).
      return evictCaches(
        tx,
        entry.project_id,
        storageLimits(ctx).cacheQuotaBytes,
        CACHE_STALE_S,
        entry.trusted ? entry.id : null,
        !entry.trusted,
      );
    });
    await deleteObjects(store, evicted);
    if (evicted.includes(entry.storage_key)) {
      return { key: entry.key, scope: entry.scope, size: entry.size, evicted: true };
    }
  }
  return { key: entry.key, scope: entry.scope, size: entry.size };
}

/** Deletes objects whose rows are gone; a failure only logs (the S3 lifecycle rule sweeps what is left). */
export async function deleteObjects(store: BlobStore, keys: string[]): Promise<void> {
  if (keys.length === 0) return;
  try {
    await store.delete(keys);
  } catch (err) {
    log('warn', 'could not delete stored objects', { count: keys.length, err });
  }
}

/** A cache entry as the API lists it. */
export interface CacheView {
  key: string;
  scope: string;
  size: number;
  trusted: boolean;
  created_at: Date;
  last_used_at: Date;
}

/** A project's cache entries, most recently used first. */
export async function listProjectCaches(
  ctx: AppContext,
  projectId: string,
): Promise<{ caches: CacheView[] }> {
  const rows = await projectCaches(ctx.pool, projectId);
  return {
    caches: rows.map((r) => ({
      key: r.key,
      scope: r.scope,
      size: r.size,
      trusted: r.trusted,
      created_at: r.created_at,
      last_used_at: r.last_used_at,
    })),
  };
}

/** Deletes a cache key from a project (every scope, or `scope` alone); a 404 when there is none. */
export async function deleteProjectCache(
  ctx: AppContext,
  projectId: string,
  key: string,
  scope: string | null,
  by: Person = ADMIN_BEARER,
): Promise<void> {
  const keys = await transaction(ctx.pool, (tx) => deleteCacheKey(tx, projectId, key, scope));
  if (keys.length === 0) {
    throw new NotFoundError(
      `project ${projectId} has no cache "${key}"${scope ? ` in ${scope}` : ''}`,
    );
  }
  await audit(ctx.pool, by, {
    projectId,
    action: 'cache',
    detail: `${key} deleted${scope ? ` in ${scope}` : ' in every scope'} (${keys.length} ${keys.length === 1 ? 'entry' : 'entries'})`,
  });
  await deleteObjects(storeOf(ctx), keys);
}
