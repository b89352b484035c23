// The metadata of artifacts and caches, in PostgreSQL only: SQL beside the
// function that runs it. The bytes are in the store (store.ts); nothing here
// makes a network call, so every function runs inside a short transaction.
import type { Queryable } from '../db/index.ts';
import { ConflictError, NotFoundError } from '../errors.ts';
import { isTrustedScope } from './scope.ts';

/** What the pipeline asked of a task (tasks.storage, migrations/011). */
export interface TaskStorage {
  artifacts?: {
    paths: string[];
    expireInS: number;
    when: 'on_success' | 'on_failure' | 'always';
  } | null;
  caches?: Array<{
    key: string;
    restoreKeys: string[];
    paths: string[];
    policy: 'pull' | 'push' | 'pull-push';
  }>;
}

/** The running attempt a runner holds under its lease, with what storage needs of its job. */
export interface LeasedTask {
  id: string;
  job_id: string;
  project_id: string;
  name: string;
  attempt: number;
  trusted: boolean;
  needs: string[];
  ref: string;
  base_ref: string | null;
  /** The project's default branch, null while no webhook has said it. */
  default_branch: string | null;
  storage: TaskStorage;
}

/**
 * The task attempt `workerId` holds under `leaseId`, locked against a
 * concurrent completion (`for share`): a 404 for a task that does not exist,
 * a 409 when the lease is not the current one or not this worker's, as on
 * heartbeat and complete.
 */
export async function leasedTask(
  tx: Queryable,
  taskId: string,
  leaseId: string,
  workerId: string,
): Promise<LeasedTask> {
  const { rows } = await tx.query<
    LeasedTask & { lease_id: string | null; worker_id: string | null; state: string }
  >(
    `select t.id, t.job_id, j.project_id, t.name, t.attempt, t.trusted, t.needs, j.ref, j.base_ref,
            p.default_branch, t.storage, t.lease_id, t.worker_id, t.state
       from tasks t join jobs j on j.id = t.job_id join projects p on p.id = j.project_id
      where t.id = $1
      for share of t`,
    [taskId],
  );
  const row = rows[0];
  if (!row) throw new NotFoundError(`task ${taskId} does not exist`);
  if (row.lease_id !== leaseId || row.worker_id !== workerId || row.state !== 'running') {
    throw new ConflictError('the lease is not the current one for this task');
  }
  const { lease_id: _l, worker_id: _w, state: _s, ...task } = row;
  return task;
}

/** An artifact as the API shows it. */
export interface ArtifactRow {
  id: string;
  project_id: string;
  job_id: string;
  task_id: string;
  task_name: string;
  attempt: number;
  path: string;
  kind: 'file' | 'tar';
  storage_key: string;
  size: number;
  sha256: string;
  trusted: boolean;
  state: 'pending' | 'ready';
  upload_id: string | null;
  created_at: Date;
  expires_at: Date;
}

function artifactColumns(a = ''): string {
  return `${a}id, ${a}project_id, ${a}job_id, ${a}task_id, ${a}task_name, ${a}attempt, ${a}path, ${a}kind,
    ${a}storage_key, ${a}size::float8 as size, ${a}sha256, ${a}trusted, ${a}state, ${a}upload_id,
    ${a}created_at, ${a}expires_at`;
}
const ARTIFACT_COLUMNS = artifactColumns();

/** What a runner asks to upload. */
export interface ArtifactUpload {
  path: string;
  kind: 'file' | 'tar';
  size: number;
  sha256: string;
}

/** The bytes already held: this attempt's artifacts and the project's unexpired ones. */
export async function artifactTotals(
  tx: Queryable,
  task: LeasedTask,
  exceptPath: string,
): Promise<{ task: number; project: number }> {
  // The project's row is locked so that two uploads cannot both pass the
  // project's limit: the caller reads the sums below in read committed, so
  // they include what the lock's previous holder committed.
  await tx.query('select 1 from projects where id = $1 for no key update', [task.project_id]);
  const { rows } = await tx.query<{ task: number; project: number }>(
    `select coalesce(sum(size) filter (where task_id = $2 and attempt = $3), 0)::float8 as task,
            coalesce(sum(size), 0)::float8 as project
       from artifacts
      where project_id = $1 and expires_at > now() and not (task_id = $2 and attempt = $3 and path = $4)`,
    [task.project_id, task.id, task.attempt, exceptPath],
  );
  return rows[0] ?? { task: 0, project: 0 };
}

/**
 * Records an artifact as pending (or answers the one a repeated request
 * recorded: same task, attempt and path). A repeat with other bytes is a 409.
 */
export async function insertArtifact(
  tx: Queryable,
  task: LeasedTask,
  upload: ArtifactUpload,
  storageKey: string,
  expireInS: number,
): Promise<ArtifactRow> {
  await tx.query(
    `insert into artifacts (project_id, job_id, task_id, task_name, attempt, path, kind, storage_key,
                            size, sha256, trusted, expires_at)
     values ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, now() + make_interval(secs => $12))
     on conflict (task_id, attempt, path) do nothing`,
    [
      task.project_id,
      task.job_id,
      task.id,
      task.name,
      task.attempt,
      upload.path,
      upload.kind,
      storageKey,
      upload.size,
      upload.sha256,
      task.trusted,
      expireInS,
    ],
  );
  const { rows } = await tx.query<ArtifactRow>(
    `select ${ARTIFACT_COLUMNS} from artifacts where task_id = $1 and attempt = $2 and path = $3`,
    [task.id, task.attempt, upload.path],
  );
  const row = rows[0]!;
  if (row.size !== upload.size || row.sha256 !== upload.sha256 || row.kind !== upload.kind) {
    throw new ConflictError(
      `artifact "${upload.path}" was already uploaded by this attempt with other contents`,
    );
  }
  return row;
}

/** Keeps a multipart upload's id; answers the one kept first when a repeat raced this one. */
export async function setArtifactUploadId(
  tx: Queryable,
  id: string,
  uploadId: string,
): Promise<string> {
  const { rows } = await tx.query<{ upload_id: string }>(
    `update artifacts set upload_id = coalesce(upload_id, $2) where id = $1 returning upload_id`,
    [id, uploadId],
  );
  return rows[0]?.upload_id ?? uploadId;
}

/** One of this attempt's artifacts (a 404 naming it otherwise). */
export async function attemptArtifact(
  tx: Queryable,
  task: LeasedTask,
  id: string,
): Promise<ArtifactRow> {
  const { rows } = await tx.query<ArtifactRow>(
    `select ${ARTIFACT_COLUMNS} from artifacts where id = $1 and task_id = $2 and attempt = $3`,
    [id, task.id, task.attempt],
  );
  if (!rows[0]) throw new NotFoundError(`artifact ${id} is not one of this attempt's`);
  return rows[0];
}

/** Marks an uploaded artifact ready; repeating it changes nothing. */
export async function markArtifactReady(tx: Queryable, id: string): Promise<void> {
  await tx.query(`update artifacts set state = 'ready' where id = $1`, [id]);
}

/**
 * The ready artifacts of the tasks `task` needs, each needed task's latest
 * attempt that uploaded any (a task a failed-only rerun kept comes with the
 * artifacts of the task it was copied from). A trusted task never receives
 * an untrusted task's artifacts.
 */
export async function neededArtifacts(tx: Queryable, task: LeasedTask): Promise<ArtifactRow[]> {
  if (task.needs.length === 0) return [];
  const { rows } = await tx.query<ArtifactRow>(
    `select ${artifactColumns('a.')}
       from tasks n
       join artifacts a on a.task_id in (n.id, n.copied_from)
      where n.job_id = $1 and n.name = any($2::text[]) and a.state = 'ready' and a.expires_at > now()
        and (a.trusted or not $3)
        and a.attempt = (select max(b.attempt) from artifacts b
                          where b.task_id = a.task_id and b.state = 'ready')
      order by n.position, a.path`,
    [task.job_id, task.needs, task.trusted],
  );
  // Rows of a copied task carry its original name; the needing task knows it by this job's.
  return rows;
}

/** A job's ready, unexpired artifacts, in task order (a 404 for a job that does not exist). */
export async function jobArtifacts(db: Queryable, jobId: string): Promise<ArtifactRow[]> {
  const { rows } = await db.query<ArtifactRow & { job_exists: boolean }>(
    `select ${artifactColumns('a.')}
       from jobs j
       join tasks t on t.job_id = j.id
       join artifacts a on a.task_id in (t.id, t.copied_from) and a.state = 'ready' and a.expires_at > now()
      where j.id = $1
      order by t.position, a.attempt, a.path`,
    [jobId],
  );
  if (rows.length === 0) {
    const job = await db.query('select 1 from jobs where id = $1', [jobId]);
    if (job.rowCount === 0) throw new NotFoundError(`job ${jobId} does not exist`);
  }
  return rows;
}

/** One ready artifact; a 404 for one that does not exist, is not ready, or has expired. */
export async function readyArtifact(db: Queryable, id: string): Promise<ArtifactRow> {
  const { rows } = await db.query<ArtifactRow>(
    `select ${ARTIFACT_COLUMNS} from artifacts where id = $1 and state = 'ready'`,
    [id],
  );
  const row = rows[0];
  if (!row) throw new NotFoundError(`artifact ${id} does not exist`);
  if (row.expires_at.getTime() <= Date.now()) {
    throw new NotFoundError(`artifact ${id} expired at ${row.expires_at.toISOString()}`);
  }
  return row;
}

/**
 * Deletes up to `batch` expired artifacts and uploads never committed,
 * answering their storage keys: the caller deletes the objects after the
 * commit (no transaction spans a call to the store).
 */
export async function deleteExpiredArtifacts(
  tx: Queryable,
  batch: number,
  pendingS: number,
): Promise<string[]> {
  const { rows } = await tx.query<{ storage_key: string }>(
    `delete from artifacts where id in (
       select id from artifacts
        where expires_at <= now()
           or (state = 'pending' and created_at < now() - make_interval(secs => $2))
        order by expires_at limit $1)
     returning storage_key`,
    [batch, pendingS],
  );
  return rows.map((r) => r.storage_key);
}

// ------------------------------------------------------------------ caches

/** A cache entry as stored. */
export interface CacheRow {
  id: string;
  project_id: string;
  scope: string;
  key: string;
  storage_key: string;
  size: number;
  sha256: string;
  trusted: boolean;
  state: 'pending' | 'ready';
  upload_id: string | null;
  task_id: string;
  attempt: number;
  created_at: Date;
  last_used_at: Date;
}

const CACHE_COLUMNS = `id, project_id, scope, key, storage_key, size::float8 as size, sha256, trusted,
  state, upload_id, task_id, attempt, created_at, last_used_at`;

/** What a restore found: an exact hit, a restore key's prefix, or nothing. */
export interface CacheMatch {
  result: 'hit' | 'restore-key' | 'miss';
  entry: CacheRow | null;
}

/**
 * Finds the entry a restore gets: `key` exactly, in the scopes in order;
 * else, for each restore key in order, the newest entry whose key starts
 * with it, in the scopes in order. Marks it used and records what the task
 * found, for the job page.
 */
export async function matchCache(
  tx: Queryable,
  task: LeasedTask,
  scopes: string[],
  key: string,
  restoreKeys: string[],
): Promise<CacheMatch> {
  let found: CacheRow | null = null;
  let result: CacheMatch['result'] = 'miss';
  const { rows: exact } = await tx.query<CacheRow>(
    `select ${CACHE_COLUMNS} from caches
      where project_id = $1 and scope = any($2::text[]) and key = $3 and state = 'ready'
      order by array_position($2::text[], scope) limit 1`,
    [task.project_id, scopes, key],
  );
  if (exact[0]) {
    found = exact[0];
    result = 'hit';
  } else {
    for (const prefix of restoreKeys) {
      const { rows } = await tx.query<CacheRow>(
        `select ${CACHE_COLUMNS} from caches
          where project_id = $1 and scope = any($2::text[]) and state = 'ready'
            and left(key, length($3)) = $3
          order by array_position($2::text[], scope), created_at desc limit 1`,
        [task.project_id, scopes, prefix],
      );
      if (rows[0]) {
        found = rows[0];
        result = 'restore-key';
        break;
      }
    }
  }
  // A trusted task reads trusted scopes only; readScopes never offers it
  // another, and this keeps it so should that ever change.
  if (found && task.trusted && !isTrustedScope(found.scope)) {
    found = null;
    result = 'miss';
  }
  if (found) await tx.query('update caches set last_used_at = now() where id = $1', [found.id]);
  await tx.query(
    `insert into cache_restores (task_id, attempt, key, result, matched_key, size)
     values ($1, $2, $3, $4, $5, $6)
     on conflict (task_id, attempt, key) do update
       set result = excluded.result, matched_key = excluded.matched_key, size = excluded.size`,
    [task.id, task.attempt, key, result, found?.key ?? null, found?.size ?? 0],
  );
  return { result, entry: found };
}

/**
 * Records a cache entry as pending for this attempt to upload, or answers
 * why not: entries are immutable, so a key the scope already holds (or that
 * another task is saving) is not saved again. A repeat by the same attempt
 * answers its own pending entry.
 */
export async function insertCache(
  tx: Queryable,
  task: LeasedTask,
  scope: string,
  key: string,
  size: number,
  sha256: string,
  storageKey: string,
): Promise<{ entry: CacheRow } | { skipped: string }> {
  await tx.query(
    `insert into caches (project_id, scope, key, storage_key, size, sha256, trusted, task_id, attempt)
     values ($1, $2, $3, $4, $5, $6, $7, $8, $9)
     on conflict (project_id, scope, key) do nothing`,
    [task.project_id, scope, key, storageKey, size, sha256, task.trusted, task.id, task.attempt],
  );
  const { rows } = await tx.query<CacheRow>(
    `select ${CACHE_COLUMNS} from caches where project_id = $1 and scope = $2 and key = $3`,
    [task.project_id, scope, key],
  );
  const entry = rows[0]!;
  if (entry.task_id === task.id && entry.attempt === task.attempt && entry.state === 'pending') {
    return { entry };
  }
  return { skipped: `cache "${key}" already exists in ${scope}; entries are not overwritten` };
}

/** Keeps a cache upload's multipart id (the first kept wins). */
export async function setCacheUploadId(
  tx: Queryable,
  id: string,
  uploadId: string,
): Promise<string> {
  const { rows } = await tx.query<{ upload_id: string }>(
    `update caches set upload_id = coalesce(upload_id, $2) where id = $1 returning upload_id`,
    [id, uploadId],
  );
  return rows[0]?.upload_id ?? uploadId;
}

/** This attempt's cache entry (a 404 otherwise). */
export async function attemptCache(tx: Queryable, task: LeasedTask, id: string): Promise<CacheRow> {
  const { rows } = await tx.query<CacheRow>(
    `select ${CACHE_COLUMNS} from caches where id = $1 and task_id = $2 and attempt = $3`,
    [id, task.id, task.attempt],
  );
  if (!rows[0]) throw new NotFoundError(`cache entry ${id} is not one this attempt is saving`);
  return rows[0];
}

/** Marks a cache entry ready; repeating it changes nothing. */
export async function markCacheReady(tx: Queryable, id: string): Promise<void> {
  await tx.query(`update caches set state = 'ready', last_used_at = now() where id = $1`, [id]);
}

/**
 * Brings a project's caches within `quota` bytes: entries unused for
 * `staleS` seconds go first (oldest use first), then the least recently
 * used, never `keep`. With `untrustedOnly` (the save of an untrusted job),
 * only untrusted entries go: a fork's saves never push main's caches out,
 * and when the untrusted ones cannot make room, the new entry goes too
 * (pass it as neither `keep` nor stale: it was used last). Answers the
 * deleted entries' storage keys.
 */
export async function evictCaches(
  tx: Queryable,
  projectId: string,
  quota: number,
  staleS: number,
  keep: string | null,
  untrustedOnly = false,
): Promise<string[]> {
  const { rows } = await tx.query<{ storage_key: string }>(
    `with everything as (
       select coalesce(sum(size), 0) as total from caches where project_id = $1 and state = 'ready'
     ), ranked as (
       -- Stale entries first (true sorts first descending), each group by oldest use.
       select id, size,
              sum(size) over (order by (last_used_at < now() - make_interval(secs => $3)) desc,
                                       last_used_at, id) as freed
         from caches
        where project_id = $1 and state = 'ready' and id is distinct from $4::uuid
          and not ($5 and trusted)
     )
     delete from caches c using ranked r, everything e
      where c.id = r.id and e.total - (r.freed - r.size) > $2
     returning c.storage_key`,
    [projectId, quota, staleS, keep, untrustedOnly],
  );
  return rows.map((r) => r.storage_key);
}

/** The bytes of a project's trusted cache entries (ready or being saved). */
export async function trustedCacheBytes(tx: Queryable, projectId: string): Promise<number> {
  const { rows } = await tx.query<{ total: number }>(
    `select coalesce(sum(size), 0)::float8 as total from caches where project_id = $1 and trusted`,
    [projectId],
  );
  return rows[0]!.total;
}

/** A project's ready cache entries, most recently used first. */
export async function projectCaches(db: Queryable, projectId: string): Promise<CacheRow[]> {
  const { rows } = await db.query<CacheRow>(
    `select ${CACHE_COLUMNS} from caches where project_id = $1 and state = 'ready'
      order by last_used_at desc, key`,
    [projectId],
  );
  if (rows.length === 0) {
    const project = await db.query('select 1 from projects where id = $1', [projectId]);
    if (project.rowCount === 0) throw new NotFoundError(`project ${projectId} does not exist`);
  }
  return rows;
}

/** Deletes a key's entries (every scope, or one); answers their storage keys. */
export async function deleteCacheKey(
  tx: Queryable,
  projectId: string,
  key: string,
  scope: string | null,
): Promise<string[]> {
  const { rows } = await tx.query<{ storage_key: string }>(
    `delete from caches where project_id = $1 and key = $2 and ($3::text is null or scope = $3)
     returning storage_key`,
    [projectId, key, scope],
  );
  return rows.map((r) => r.storage_key);
}

/** Cache uploads never committed, and old restore records; answers the storage keys. */
export async function deleteStaleCaches(
  tx: Queryable,
  batch: number,
  pendingS: number,
  keepDays: number,
): Promise<string[]> {
  const { rows } = await tx.query<{ storage_key: string }>(
    `delete from caches where id in (
       select id from caches where state = 'pending' and created_at < now() - make_interval(secs => $2)
        limit $1)
     returning storage_key`,
    [batch, pendingS],
  );
  await tx.query(
    `delete from cache_restores where ctid in (
       select ctid from cache_restores where created_at < now() - make_interval(days => $2) limit $1)`,
    [batch, keepDays],
  );
  return rows.map((r) => r.storage_key);
}

/** What each task's restores found, for the job page. */
export interface CacheRestoreRow {
  task_id: string;
  attempt: number;
  key: string;
  result: 'hit' | 'restore-key' | 'miss';
  matched_key: string | null;
  size: number;
}

/** The cache restores of a job's tasks, latest attempt of each. */
export async function jobCacheRestores(db: Queryable, jobId: string): Promise<CacheRestoreRow[]> {
  const { rows } = await db.query<CacheRestoreRow>(
    `select r.task_id, r.attempt, r.key, r.result, r.matched_key, r.size::float8 as size
       from tasks t join cache_restores r on r.task_id = t.id and r.attempt = t.attempt
      where t.job_id = $1
      order by t.position, r.key`,
    [jobId],
  );
  return rows;
}
