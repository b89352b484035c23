// Task logs, stored per attempt in chunks keyed by the byte offset the runner
// counted, so a retried upload of a chunk is recognised and stored once.
import { type Pool, type Queryable, transaction } from './db/index.ts';
import { ConflictError, NotFoundError, PayloadTooLargeError } from './errors.ts';
import { forgeToken, getProjectRow, secretValues } from './projects.ts';
import type { Keyring } from './secrets.ts';

export const MAX_CHUNK_BYTES = 1024 * 1024;
const MASK = '***';
// Shorter values would mask common text ("1", "on") everywhere they appear.
const MIN_MASKED_LENGTH = 3;

/** Replaces every occurrence of each secret value with ***, longest values first. */
export function maskSecrets(text: string, values: string[]): string {
  let out = text;
  const masked = values
    .filter((v) => v.length >= MIN_MASKED_LENGTH)
    .sort((a, b) => b.length - a.length);
  for (const value of masked) out = out.split(value).join(MASK);
  return out;
}

export interface AppendLog {
  workerId: string;
  taskId: string;
  leaseId: string;
  offset: number;
  data: string;
  /** The most a task's attempt may log, in bytes. */
  maxBytes: number;
}

/**
 * Appends a chunk to the current attempt's log. `offset` and the answered size
 * count the bytes the runner sent (UTF-8). A chunk already stored (wholly
 * below the size) is accepted without storing it again; the part of a chunk
 * past the size is stored; an offset past the size is a conflict that carries
 * the size, so the runner can resend from there.
 */
export async function appendLog(
  pool: Pool,
  keyring: Keyring,
  input: AppendLog,
): Promise<{ size: number }> {
  const bytes = Buffer.from(input.data, 'utf8');
  if (bytes.length > MAX_CHUNK_BYTES) {
    throw new PayloadTooLargeError(`a log chunk is at most ${MAX_CHUNK_BYTES} bytes`);
  }
  return transaction(pool, async (tx) => {
    const { rows } = await tx.query<{
      state: string;
      lease_id: string | null;
      worker_id: string | null;
      attempt: number;
      project_id: string;
      trusted: boolean;
      secrets: string[];
    }>(
      `select t.state, t.lease_id, t.worker_id, t.attempt, j.project_id, j.trusted, t.secrets
         from tasks t join jobs j on j.id = t.job_id
        where t.id = $1`,
      [input.taskId],
    );
    const task = rows[0];
    if (!task) throw new NotFoundError(`task ${input.taskId} does not exist`);
    if (
      task.state !== 'running' ||
      task.lease_id !== input.leaseId ||
      task.worker_id !== input.workerId
    ) {
      throw new ConflictError(
        `lease is not the task's current one (expired, completed, or held by another worker)`,
      );
    }
    // Locking the attempt row serialises the chunks of one attempt; a
    // completion that finished the attempt after our snapshot makes this raise
    // 40001, and the retry finds the lease gone.
    const attempt = await tx.query<{ log_size: number }>(
      'select log_size from task_attempts where task_id = $1 and attempt = $2 for update',
      [input.taskId, task.attempt],
    );
    const size = attempt.rows[0]!.log_size;
    if (input.offset > size) {
      const err = new ConflictError(`offset ${input.offset} is past the log's size ${size}`);
      err.details = { size };
      throw err;
    }
    if (input.offset + bytes.length <= size) return { size };
    const tail = bytes.subarray(size - input.offset);
    if (size + tail.length > input.maxBytes) {
      throw new PayloadTooLargeError(
        `the log of this attempt reached its limit of ${input.maxBytes} bytes`,
      );
    }
    let text = tail.toString('utf8');
    const values = await maskedValues(tx, keyring, task);
    if (values.length > 0) {
      // A value can be cut in two by where the runner's buffer filled, its
      // start ending the previous chunk: mask the two together, and when that
      // masks across the boundary, keep the result in the previous chunk.
      const previous = await tx.query<{ byte_offset: number; data: Buffer }>(
        `select byte_offset, data from log_chunks
          where task_id = $1 and attempt = $2 and byte_offset < $3
          order by byte_offset desc limit 1`,
        [input.taskId, task.attempt, size],
      );
      const before = previous.rows[0];
      const prevText = before ? before.data.toString('utf8') : '';
      const joined = maskSecrets(prevText + text, values);
      if (before && !joined.startsWith(prevText)) {
        await tx.query(
          'update log_chunks set data = $4 where task_id = $1 and attempt = $2 and byte_offset = $3',
          [input.taskId, task.attempt, before.byte_offset, Buffer.from(joined, 'utf8')],
        );
        text = '';
      } else {
        text = joined.slice(prevText.length);
      }
    }
    await tx.query(
      `insert into log_chunks (task_id, attempt, byte_offset, size, data) values ($1, $2, $3, $4, $5)`,
      [input.taskId, task.attempt, size, tail.length, Buffer.from(text, 'utf8')],
    );
    await tx.query('update task_attempts set log_size = $3 where task_id = $1 and attempt = $2', [
      input.taskId,
      task.attempt,
      size + tail.length,
    ]);
    return { size: size + tail.length };
  });
}

/** The most one read of a log answers, in bytes: a page always fits a Lambda response. */
export const MAX_LOG_PAGE_BYTES = 1024 * 1024;

export interface LogPage {
  attempt: number;
  /** The bytes stored for the attempt, in the runner's count. */
  size: number;
  /** Where the page ends, in the runner's count: the offset of the next page. */
  end: number;
  text: string;
}

/**
 * A page of the stored log of an attempt (the latest unless given): at most
 * `limit` bytes from `offset`, both in the runner's count. A chunk stored as
 * sent is cut at the page's edges; a chunk whose secrets were masked has other
 * byte positions, so it belongs whole to the page it starts in.
 */
export async function readLog(
  db: Queryable,
  taskId: string,
  attempt?: number,
  offset = 0,
  limit = MAX_LOG_PAGE_BYTES,
): Promise<LogPage> {
  const { rows } = await db.query<{ attempt: number }>('select attempt from tasks where id = $1', [
    taskId,
  ]);
  const task = rows[0];
  if (!task) throw new NotFoundError(`task ${taskId} does not exist`);
  const which = attempt ?? task.attempt;
  if (which === 0 && attempt === undefined) return { attempt: 0, size: 0, end: 0, text: '' };
  const found = await db.query<{ log_size: number }>(
    'select log_size from task_attempts where task_id = $1 and attempt = $2',
    [taskId, which],
  );
  if (!found.rows[0]) throw new NotFoundError(`task ${taskId} has no attempt ${which}`);
  const size = found.rows[0].log_size;
  const end = Math.max(offset, Math.min(size, offset + limit));
  const chunks = await db.query<{ byte_offset: number; size: number; data: Buffer }>(
    `select byte_offset, size, data from log_chunks
      where task_id = $1 and attempt = $2 and byte_offset + size > $3 and byte_offset < $4
      order by byte_offset`,
    [taskId, which, offset, end],
  );
  const parts: Buffer[] = [];
  for (const c of chunks.rows) {
    if (c.data.length === c.size) {
      parts.push(c.data.subarray(Math.max(0, offset - c.byte_offset), end - c.byte_offset));
    } else if (c.byte_offset >= offset) {
      parts.push(c.data);
    }
  }
  return { attempt: which, size, end, text: utf8(Buffer.concat(parts)) };
}

/**
 * Text from bytes cut at arbitrary offsets: a character split by the cut is
 * dropped rather than turned into a replacement character.
 */
function utf8(bytes: Buffer): string {
  let start = 0;
  while (start < bytes.length && start < 3 && (bytes[start]! & 0xc0) === 0x80) start++;
  let stop = bytes.length;
  for (let i = bytes.length - 1; i >= Math.max(0, bytes.length - 4); i--) {
    const b = bytes[i]!;
    if ((b & 0xc0) === 0x80) continue;
    const need = b >= 0xf0 ? 4 : b >= 0xe0 ? 3 : b >= 0xc0 ? 2 : 1;
    if (bytes.length - i < need) stop = i;
    break;
  }
  return bytes.subarray(start, stop).toString('utf8');
}

/**
 * How many line feeds an attempt's log holds before `offset` (the runner's
 * count), so a page that starts there can number its lines. Counted in the
 * database: the bytes never travel.
 */
export async function countLogLines(
  db: Queryable,
  taskId: string,
  attempt: number,
  offset: number,
): Promise<number> {
  if (offset <= 0) return 0;
  // Chunks wholly before the offset count whole; the one across it is cut
  // there when stored as sent. encode(.., 'escape') keeps a line feed as it
  // is (it rewrites only NUL, backslash and bytes above 127), and needs no
  // whole characters where the cut falls.
  const { rows } = await db.query<{ lines: string | null }>(
    `select sum(length(t) - length(replace(t, E'\\n', ''))) as lines
       from (select encode(case when byte_offset + size > $3 and length(data) = size
                                then substring(data from 1 for ($3::bigint - byte_offset)::int)
                                else data end, 'escape') as t
               from log_chunks
              where task_id = $1 and attempt = $2 and byte_offset < $3) c`,
    [taskId, attempt, offset],
  );
  return Number(rows[0]?.lines ?? 0);
}

/**
 * The values to mask in what a task's runner reports: the secrets the task
 * lists and the project's forge token (the clone token), for trusted jobs; an
 * untrusted job is given neither, so has neither to leak.
 */
async function maskedValues(
  db: Queryable,
  keyring: Keyring,
  task: { project_id: string; trusted: boolean; secrets: string[] },
): Promise<string[]> {
  if (!task.trusted) return [];
  const values = Object.values(await secretValues(db, keyring, task.project_id, task.secrets));
  const project = await getProjectRow(db, task.project_id);
  const token = project ? forgeToken(keyring, project) : null;
  return token ? [...values, token] : values;
}

/** The values to mask in what a task's runner reports (see maskedValues), by task id. */
/** What a completion's error is stored as when the secrets to mask it with cannot be opened. */
export const WITHHELD_ERROR = '[withheld: secrets could not be opened]';

export async function taskSecretValues(
  db: Queryable,
  keyring: Keyring,
  taskId: string,
): Promise<string[]> {
  const { rows } = await db.query<{ project_id: string; trusted: boolean; secrets: string[] }>(
    `select j.project_id, j.trusted, t.secrets from tasks t join jobs j on j.id = t.job_id
      where t.id = $1`,
    [taskId],
  );
  return rows[0] ? maskedValues(db, keyring, rows[0]) : [];
}
