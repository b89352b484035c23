// A task's log as the job page shows it: numbered lines, ANSI colours turned
// into spans by ansi_up (which escapes the text), read a page (at most 1 MiB)
// at a time: the last page first, earlier ones on request, and while the task
// runs, what was added since.
import { AnsiUp } from 'ansi_up';
import type { Queryable } from '../db/index.ts';
import { NotFoundError } from '../errors.ts';
import { lineTimes } from '../scheduler/log-times.ts';
import { countLogLines, MAX_LOG_PAGE_BYTES, readLog } from '../scheduler/task-log.ts';
import { esc } from './html.ts';
import { markOf } from './log-marks.ts';

export interface LogPiece {
  attempt: number;
  /** Bytes stored for the attempt. */
  size: number;
  /** Where the lines start and end, in the runner's count of bytes. */
  from: number;
  end: number;
  /** The number of the first line. */
  line: number;
  /** How many lines `html` holds. */
  lines: number;
  /** The last line has no line feed yet: the next piece starts it again. */
  partial: boolean;
  html: string;
}

// An OSC 8 hyperlink's opening (`ESC ] 8 ; params ; URL`) or closing
// (`ESC ] 8 ; ;`) sequence, ended by ST (`ESC \`) or BEL, within one line.
// biome-ignore lint/suspicious/noControlCharactersInRegex: ESC and BEL are what it matches
const OSC8 = /\x1b\]8;[^\x07\x1b\n]*(?:\x07|\x1b\\)/g;

/**
 * Lines as HTML: each a block with an anchor of its number; the text is the
 * log's, colours rendered. A log makes no links: a fork's script writes what
 * it likes, and an OSC 8 hyperlink on the job page would be a link the site
 * itself seems to offer. Its sequences are dropped and its text kept, as a
 * terminal without hyperlinks shows it.
 */
export function renderLines(
  text: string,
  first: number,
  times: readonly number[] = [],
): { html: string; lines: number; partial: boolean } {
  if (text === '') return { html: '', lines: 0, partial: false };
  const ansi = new AnsiUp();
  ansi.use_classes = false;
  // Should a link get past OSC8 (a sequence ansi_up reads otherwise), an
  // empty allowlist still renders no <a>.
  ansi.url_allowlist = {};
  const parts = text.replace(OSC8, '').split('\n');
  const partial = parts[parts.length - 1] !== '';
  if (!partial) parts.pop();
  const out: string[] = [];
  for (let i = 0; i < parts.length; i++) {
    const n = first + i;
    const newline = i < parts.length - 1 || !partial ? '\n' : '';
    // A partial last line may be a marker still being written: marked once whole.
    const mark = i < parts.length - 1 || !partial ? markOf(parts[i]!) : undefined;
    const at = times[i];
    const time = at ? timeHtml(at) : '';
    const body = mark?.text === undefined ? ansi.ansi_to_html(parts[i]!) : esc(mark.text);
    out.push(
      `<span class="l" id="L${n}"${at ? ` data-t="${at}"` : ''}${mark?.attrs ?? ''}><a class="n" href="#L${n}" data-n="${n}" aria-label="line ${n}"></a>${time}${body}${newline}</span>`,
    );
  }
  return { html: out.join(''), lines: parts.length, partial };
}

/**
 * A line's time, shown when the page's Timestamps box is ticked (UTC, to the
 * second; the title has the milliseconds). Drawn by CSS from data-ts, as the
 * line's number is, so it is never part of the line's text (copied, searched).
 */
function timeHtml(at: number): string {
  const iso = new Date(at).toISOString();
  return `<span class="ts" data-ts="${iso.slice(11, 19)}" title="${iso}"></span>`;
}

const nothing = (attempt: number): LogPiece => ({
  attempt,
  size: 0,
  from: 0,
  end: 0,
  line: 1,
  lines: 0,
  partial: false,
  html: '',
});

// An attempt with no row has no log: a task copied by a failed-only rerun
// whose original job is gone, or one whose logs the retention deleted.
const noAttempt = (attempt: number | undefined) => (err: unknown) => {
  if (!(err instanceof NotFoundError)) throw err;
  return { attempt: attempt ?? 0, size: 0, end: 0, text: '' };
};

/** The byte length of text up to and including its last line feed. */
function completeBytes(text: string): number {
  const cut = text.lastIndexOf('\n');
  return cut < 0 ? 0 : Buffer.byteLength(text.slice(0, cut + 1), 'utf8');
}

/**
 * The last page of an attempt's log that ends at `before` (default: all of
 * it), starting at a line: the line cut by the page's start is left to the
 * page before.
 */
export async function logWindow(
  db: Queryable,
  taskId: string,
  attempt: number | undefined,
  before?: number,
): Promise<LogPiece> {
  const head = await readLog(db, taskId, attempt, 0, 0).catch(noAttempt(attempt));
  if (head.size === 0) return nothing(head.attempt);
  const end = Math.min(before ?? head.size, head.size);
  const start = Math.max(0, end - MAX_LOG_PAGE_BYTES);
  // One byte more, the one before the page: is the page's first line whole?
  const read = start > 0 ? start - 1 : 0;
  const page = await readLog(db, taskId, head.attempt, read, end - read);
  let text = page.text;
  let from = read;
  if (start > 0) {
    const cut = text.indexOf('\n');
    const dropped = cut < 0 ? text : text.slice(0, cut + 1);
    from += Buffer.byteLength(dropped, 'utf8');
    text = text.slice(dropped.length);
  }
  const line = 1 + (from > 0 ? await countLogLines(db, taskId, head.attempt, from) : 0);
  const rendered = renderLines(text, line, await lineTimes(db, taskId, head.attempt, from, text));
  return {
    attempt: head.attempt,
    size: head.size,
    from,
    end: rendered.partial ? from + completeBytes(text) : page.end,
    line,
    ...rendered,
  };
}

/** What an attempt's log holds from `from` (a line's start), numbered from `line`. */
export async function logTail(
  db: Queryable,
  taskId: string,
  attempt: number,
  from: number,
  line: number,
): Promise<LogPiece> {
  const page = await readLog(db, taskId, attempt, from).catch(noAttempt(attempt));
  if (page.size === 0) return nothing(page.attempt);
  const rendered = renderLines(
    page.text,
    line,
    await lineTimes(db, taskId, page.attempt, from, page.text),
  );
  return {
    attempt: page.attempt,
    size: page.size,
    from,
    end: rendered.partial ? from + completeBytes(page.text) : page.end,
    line,
    ...rendered,
  };
}

/** The text of a log piece that says there is nothing (yet). */
export function emptyLogNote(state: string): string {
  const why =
    state === 'waiting' || state === 'queued'
      ? 'The task has not started yet.'
      : state === 'skipped' || state === 'cancelled'
        ? 'The task did not run.'
        : 'Nothing logged.';
  return esc(why);
}
