// Masking secret values in what a runner reports (log text, errors, outputs),
// by one rule on both sides of the wire: the control plane (lib/app/logs.ts) and
// the reference runner (runner/logstream.ts) build the same Masker.
//
// A value is masked in the forms a script is likely to print it in:
// - as it is, and each line of a value that spans lines;
// - its base64 (of its UTF-8 bytes) at each of the three alignments it can
//   have inside a longer base64 text, and the base64url spelling of those;
// - with any of its characters URL-encoded (`%2D`, `%2d`, `+` for a space)
//   or JSON-escaped (`\u002d`, `\"`, `\/`, `\n`), in any mix.
// Masking guards against accidents, not against a script set on leaking a
// value (it can always reverse or hex-encode it first).

/** What a masked value is replaced with. */
export const MASK = '***';

/**
 * Values shorter than this (in characters) are not masked: a secret such as
 * `on`, `1` or `dev` would turn every occurrence of that text into ***.
 * Setting one answers a warning (docs/limits.md).
 */
export const MIN_SECRET_LENGTH = 4;

/** One character of a form: the spellings it may appear in. */
interface Unit {
  /** Compared exactly. */
  exact: string[];
  /** Escapes with hex digits, compared case-insensitively (stored lower-case). */
  hex: string[];
}

const JSON_SHORT: Readonly<Record<string, string>> = {
  '"': '\\"',
  '\\': '\\\\',
  '/': '\\/',
  '\b': '\\b',
  '\f': '\\f',
  '\n': '\\n',
  '\r': '\\r',
  '\t': '\\t',
};

function hex2(n: number): string {
  return n.toString(16).padStart(2, '0');
}

function unitOf(char: string): Unit {
  const exact = [char];
  if (char === ' ') exact.push('+');
  const short = JSON_SHORT[char];
  if (short) exact.push(short);
  const url = [...Buffer.from(char, 'utf8')].map((b) => `%${hex2(b)}`).join('');
  let json = '';
  for (let i = 0; i < char.length; i++) {
    json += `\\u${char.charCodeAt(i).toString(16).padStart(4, '0')}`;
  }
  return { exact, hex: [url, json] };
}

function escapeRegExp(text: string): string {
  return text.replace(/[.*+?^${}()|[\]\\/-]/g, '\\$&');
}

/** A hex escape as a pattern: its letters in either case. */
function hexPattern(spelling: string): string {
  return [...escapeRegExp(spelling)]
    .map((c) => (/[a-f]/.test(c) ? `[${c}${c.toUpperCase()}]` : c))
    .join('');
}

function unitPattern(unit: Unit): string {
  const alternatives = [...unit.exact.map(escapeRegExp), ...unit.hex.map(hexPattern)];
  return `(?:${alternatives.join('|')})`;
}

/** The most UTF-16 units and UTF-8 bytes one spelling of the unit takes. */
function unitSpan(unit: Unit): { chars: number; bytes: number } {
  let chars = 0;
  let bytes = 0;
  for (const s of [...unit.exact, ...unit.hex]) {
    chars = Math.max(chars, s.length);
    bytes = Math.max(bytes, Buffer.byteLength(s, 'utf8'));
  }
  return { chars, bytes };
}

/**
 * The base64 text that stands for `value` wherever it falls in a longer
 * base64 text: the value's bytes after 0, 1 or 2 other bytes, without the
 * characters those bytes (or the ones after the value) also decide.
 */
export function base64Forms(value: string): string[] {
  const bytes = Buffer.from(value, 'utf8');
  const forms: string[] = [];
  for (const before of [0, 1, 2]) {
    const all = Buffer.concat([Buffer.alloc(before), bytes]);
    let text = all.toString('base64').replace(/=+$/, '');
    // The last character of a partial group also holds bits of what follows.
    if (all.length % 3 !== 0) text = text.slice(0, -1);
    // One byte before: the first two characters hold its bits; two bytes: three.
    text = text.slice(before === 0 ? 0 : before + 1);
    if (text.length > 0) forms.push(text);
  }
  return forms;
}

/** Masks secret values, in every form listed at the top of this file. */
export class Masker {
  /** The texts masked, each of which may also appear escaped; longest first. */
  readonly forms: readonly string[];
  /** The most UTF-16 units one masked form can span, escaped as much as it can be. */
  readonly longestChars: number;
  /** The same in UTF-8 bytes: how much of a stored log's end may hold the start of a form. */
  readonly longestBytes: number;
  private readonly units: Unit[][];
  private readonly pattern: RegExp | null;
  private readonly starts: Set<string>;
  private readonly escapes: RegExp;

  constructor(values: Iterable<string>) {
    const forms = new Set<string>();
    const long = (v: string) => [...v].length >= MIN_SECRET_LENGTH;
    for (const value of values) {
      if (!long(value)) continue;
      forms.add(value);
      if (value.includes('\n')) {
        for (const line of value.split('\n')) {
          const bare = line.endsWith('\r') ? line.slice(0, -1) : line;
          if (long(bare)) forms.add(bare);
        }
      }
      for (const b64 of base64Forms(value)) {
        if (!long(b64)) continue;
        forms.add(b64);
        if (/[+/]/.test(b64)) forms.add(b64.replace(/\+/g, '-').replace(/\//g, '_'));
      }
    }
    this.forms = [...forms].sort((a, b) => b.length - a.length || (a < b ? -1 : 1));
    this.units = this.forms.map((form) => [...form].map(unitOf));
    let chars = 0;
    let bytes = 0;
    for (const units of this.units) {
      let c = 0;
      let b = 0;
      for (const unit of units) {
        const span = unitSpan(unit);
        c += span.chars;
        b += span.bytes;
      }
      chars = Math.max(chars, c);
      bytes = Math.max(bytes, b);
    }
    this.longestChars = chars;
    this.longestBytes = bytes;
    // What a form's first character can start with: the literal, or an escape.
    this.starts = new Set(
      this.units.flatMap((units) => {
        const first = units[0]!;
        return [...first.exact, ...first.hex].map((s) => s[0]!);
      }),
    );
    this.pattern =
      this.units.length === 0
        ? null
        : new RegExp(this.units.map((units) => units.map(unitPattern).join('')).join('|'), 'g');
    // Every spelling other than the form itself has one of these in it.
    this.escapes = new RegExp(this.forms.some((f) => f.includes(' ')) ? '[%\\\\+]' : '[%\\\\]');
  }

  /** Whether there is nothing to mask. */
  get empty(): boolean {
    return this.pattern === null;
  }

  /** `text` with every masked form replaced by ***. */
  mask(text: string): string {
    if (this.pattern === null || text === '') return text;
    // The pattern costs about 30 ms a MiB, the plain search a tenth of that:
    // text with nothing escaped in it can only hold the forms as they are.
    if (this.escapes.test(text)) return text.replace(this.pattern, MASK);
    let out = text;
    for (const form of this.forms) if (out.includes(form)) out = out.split(form).join(MASK);
    return out;
  }

  /**
   * How many characters at the end of `text` could be the start of a masked
   * form whose rest is still to come: held back, a value is never sent in
   * two pieces that no mask would catch.
   */
  unsafeSuffixLength(text: string): number {
    if (this.pattern === null) return 0;
    const from = Math.max(0, text.length - this.longestChars + 1);
    for (let start = from; start < text.length; start++) {
      if (!this.starts.has(text[start]!)) continue;
      if (this.units.some((units) => couldStart(text, start, units))) return text.length - start;
    }
    return 0;
  }
}

/**
 * Whether `text` from `pos` to its end is the beginning of some spelling of
 * the form `units` (the end falling inside it, not after it). Walked with an
 * explicit stack: a form can be as long as a 64 KiB secret.
 */
function couldStart(text: string, pos: number, units: Unit[]): boolean {
  const stack: Array<[number, number]> = [[pos, 0]];
  while (stack.length > 0) {
    const [at, u] = stack.pop()!;
    if (at === text.length) return true;
    if (u === units.length) continue; // a whole form: mask() replaces it
    const unit = units[u]!;
    const rest = text.length - at;
    for (const [spellings, fold] of [
      [unit.exact, false],
      [unit.hex, true],
    ] as const) {
      for (const s of spellings) {
        const n = Math.min(s.length, rest);
        const seen = text.slice(at, at + n);
        if ((fold ? seen.toLowerCase() : seen) !== s.slice(0, n)) continue;
        if (n < s.length) return true;
        stack.push([at + n, u + 1]);
      }
    }
  }
  return false;
}
