// The time of each line of a task's log. The runner sends its log in chunks
// at the byte offsets it counted, every second or so (runner/logstream.ts),
// and each chunk is stored with the time it arrived (log_chunks.created_at):
// a line's time is that of the chunk its first byte arrived in. A chunk whose
// secrets were masked has other byte positions than the runner's; its lines
// are placed by the runner's count all the same, which at worst gives a line
// the time of the chunk beside it.
import type { Queryable } from '../db/index.ts';
import { type LogPage, readLog } from './task-log.ts';

/**
 * The arrival time (ms since the epoch) of each line of `text`, which starts
 * at the runner's byte `from` of the attempt's log, at a line's start: one
 * time for each piece of `text.split('\n')` (an empty last piece included).
 */
export async function lineTimes(
  db: Queryable,
  taskId: string,
  attempt: number,
  from: number,
  text: string,
): Promise<number[]> {
  const parts = text.split('\n');
  const end = from + Buffer.byteLength(text, 'utf8');
  const { rows } = await db.query<{ byte_offset: string; at: Date }>(
    `select byte_offset, created_at as at from log_chunks
      where task_id = $1 and attempt = $2 and byte_offset + size > $3 and byte_offset <= $4
      order by byte_offset`,
    [taskId, attempt, from, end],
  );
  const chunks = rows.map((r) => ({ offset: Number(r.byte_offset), at: r.at.getTime() }));
  const times: number[] = [];
  let offset = from;
  let c = 0;
  for (const part of parts) {
    while (c + 1 < chunks.length && chunks[c + 1]!.offset <= offset) c++;
    times.push(chunks[c]?.at ?? 0);
    offset += Buffer.byteLength(part, 'utf8') + 1;
  }
  return times;
}

/**
 * `text` with each line that starts in it prefixed by its time
 * (`2026-12-06T08:12:03.120Z `): the raw log's `?timestamps=1`. `atLineStart`
 * says whether the text's first byte starts a line (the page starts the log,
 * or follows a line feed); a line cut by the page's start is left as it is.
 */
export async function withTimestamps(
  db: Queryable,
  taskId: string,
  attempt: number,
  from: number,
  text: string,
  atLineStart: boolean,
): Promise<string> {
  if (text === '') return text;
  const times = await lineTimes(db, taskId, attempt, from, text);
  const parts = text.split('\n');
  return parts
    .map((part, i) => {
      if ((i === 0 && !atLineStart) || (i === parts.length - 1 && part === '')) return part;
      return `${new Date(times[i]!).toISOString()} ${part}`;
    })
    .join('\n');
}

/** A page read from `offset` (lib/scheduler/task-log.ts readLog) with its lines' times. */
export async function stampPage(
  db: Queryable,
  taskId: string,
  page: LogPage,
  offset: number,
): Promise<string> {
  const before = offset > 0 ? (await readLog(db, taskId, page.attempt, offset - 1, 1)).text : '\n';
  return withTimestamps(db, taskId, page.attempt, offset, page.text, before === '\n');
}
