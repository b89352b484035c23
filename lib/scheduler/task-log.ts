// Reading a task's log: pages of an attempt's stored chunks (lib/app/logs.ts
// appends them), cut where the reader asks, and the lines before a page.
import type { Queryable } from '../db/index.ts';
import { NotFoundError } from '../errors.ts';

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
