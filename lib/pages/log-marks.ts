// What a log line marks, for the job page: the start or end of a collapsible
// section (GitHub's `::group::NAME` / `::endgroup::`, GitLab's
// `section_start:TS:NAME` / `section_end:TS:NAME`), or a step (the runner
// echoes each script line as `+ line` before it runs it: runner/script.ts).
// The page's script (lib/pages/log-client.ts) folds sections and times steps
// from these attributes.
import { esc } from './html.ts';

// biome-ignore lint/suspicious/noControlCharactersInRegex: ANSI sequences start with ESC
const ANSI = /\x1b\[[0-9;?]*[A-Za-z]/g;
const GITLAB_START = /^section_start:(\d{1,12}):([A-Za-z0-9_.-]{1,100})(?:\[[^\]\r]{0,200}\])?\r?/;
const GITLAB_END = /^section_end:(\d{1,12}):([A-Za-z0-9_.-]{1,100})\r?/;
const GROUP = /^::group::(.{0,500})$/;
const END_GROUP = /^::endgroup::\s*$/;

export interface LineMark {
  /** Attributes for the line's element, escaped. */
  attrs: string;
  /** The text to show instead of the line's (a section's title), or undefined to show the line. */
  text?: string;
}

/** The marks of one raw line (ANSI sequences and all); undefined for a plain line. */
export function markOf(raw: string): LineMark | undefined {
  if (raw.length > 2000) return undefined;
  const plain = raw.replace(ANSI, '');
  let m = GITLAB_START.exec(plain);
  if (m) {
    // The title is what follows the marker's carriage return.
    const rest = plain.slice(m[0].length).replace(/\r/g, '').trim();
    return {
      attrs: ` data-sec="start" data-sec-name="${esc(m[2]!)}" data-sec-t="${Number(m[1]) * 1000}"`,
      text: rest || m[2]!,
    };
  }
  m = GITLAB_END.exec(plain);
  if (m) {
    return {
      attrs: ` data-sec="end" data-sec-name="${esc(m[2]!)}" data-sec-t="${Number(m[1]) * 1000}"`,
      text: '',
    };
  }
  m = GROUP.exec(plain.replace(/\r$/, ''));
  if (m) return { attrs: ' data-sec="start"', text: m[1]!.trim() || 'group' };
  if (END_GROUP.test(plain)) return { attrs: ' data-sec="end"', text: '' };
  if (plain.startsWith('+ ')) return { attrs: ' data-step=""' };
  return undefined;
}
