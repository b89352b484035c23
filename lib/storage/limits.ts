// The limits on artifacts and caches (docs/limits.md), with the messages a
// user sees when one is reached: each names the limit and the setting.

/** Default and largest `expire_in` of an artifact. */
export const DEFAULT_ARTIFACT_EXPIRY_S = 30 * 86_400;
export const MAX_ARTIFACT_EXPIRY_S = 400 * 86_400;
/** A cache entry unused this long is evicted first when the quota is reached. */
export const CACHE_STALE_S = 7 * 86_400;
/** An upload never committed (a runner that died) is forgotten after this. */
export const PENDING_UPLOAD_S = 86_400;

export interface StorageLimits {
  fileMaxBytes: number;
  taskMaxBytes: number;
  projectMaxBytes: number;
  cacheQuotaBytes: number;
}

/** 1536 → "1.5 KiB"; exact byte counts stay beside it in messages. */
export function humanBytes(n: number): string {
  const units = ['bytes', 'KiB', 'MiB', 'GiB', 'TiB'];
  let value = n;
  let unit = 0;
  while (value >= 1024 && unit < units.length - 1) {
    value /= 1024;
    unit++;
  }
  return unit === 0 ? `${n} bytes` : `${Number(value.toFixed(1))} ${units[unit]}`;
}

export function fileTooLarge(path: string, size: number, max: number): string {
  return `artifact file "${path}" is ${size} bytes (${humanBytes(size)}); at most ${max} bytes (${humanBytes(max)}) per file are allowed (CONDUCTOR_ARTIFACT_FILE_MAX_BYTES)`;
}

export function taskTooLarge(total: number, max: number): string {
  return `the task's artifacts reach ${total} bytes (${humanBytes(total)}); at most ${max} bytes (${humanBytes(max)}) per task are allowed (CONDUCTOR_ARTIFACT_TASK_MAX_BYTES)`;
}

export function projectTooLarge(total: number, max: number): string {
  return `the project's unexpired artifacts would reach ${total} bytes (${humanBytes(total)}); at most ${max} bytes (${humanBytes(max)}) per project are allowed (CONDUCTOR_ARTIFACT_PROJECT_MAX_BYTES); they free up as artifacts expire`;
}

export function cacheTooLarge(key: string, size: number, max: number): string {
  return `cache "${key}" is ${size} bytes (${humanBytes(size)}); at most ${max} bytes (${humanBytes(max)}) per entry are allowed (CONDUCTOR_CACHE_QUOTA_BYTES, CONDUCTOR_ARTIFACT_FILE_MAX_BYTES)`;
}
