// Path patterns (`changes:` on the control plane, artifact and cache `paths`
// on the runner): `*` is any run of characters within one directory, `**` as
// a whole segment any number of directories, `?` one character, `[a-z]`,
// `[abc]`, `[!a]` / `[^a]` one character of (or not of) a class, `{a,b}`
// alternatives, `\` takes the next character as itself. Dot files match like
// any other.
//
// No regular expression: picomatch and minimatch compile globs to
// backtracking ones, and `*a*a*a*a*a*a*a*a*a*a*a*a*b` against forty `a`s took
// picomatch 155 s with extglobs off (docs/architecture.md). Here a pattern is
// matched segment by segment, each star-separated chunk placed at its leftmost
// fit and never moved again (the same for `**` over segments): a wildcard can
// take any run, so the leftmost fit leaves the most room for what follows, and
// nothing is ever tried twice. One match costs at most pattern × path steps;
// every step is counted against a budget the caller passes, so even a list
// of patterns and files a stranger chose ends in bounded time.

/** Most characters of a path that is matched at all; a longer one is for the caller to decide (changesMatch runs the task). */
export const MAX_MATCHED_PATH = 4096;
/** Most wildcards (`*` runs, `**`, `?`, classes) one pattern may hold. */
export const MAX_WILDCARDS = 32;
/** Most patterns one pattern's braces may expand to. */
export const MAX_BRACE_EXPANSIONS = 64;

/** A pattern that cannot be matched: extglob syntax, a brace range, too many wildcards. */
export class PathPatternError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'PathPatternError';
  }
}

/** Matching ran out of its budget of steps; the caller decides what that means. */
export class MatchBudgetError extends Error {
  constructor(readonly steps: number) {
    super(`matching the path patterns took more than ${steps} steps`);
    this.name = 'MatchBudgetError';
  }
}

/** Steps left for a run of matches: one comparison of a pattern character with a path character is one step. */
export class MatchBudget {
  left: number;
  constructor(readonly steps: number) {
    this.left = steps;
  }
  spend(n: number): void {
    this.left -= n;
    if (this.left < 0) throw new MatchBudgetError(this.steps);
  }
}

// One character of a segment: a literal (its code unit), `?`, or a class.
type Tok = number | 'any' | { neg: boolean; ranges: number[] };
// A segment: chunks of single characters between stars (one chunk: no star).
interface Seg {
  chunks: Tok[][];
  min: number;
}
const GLOBSTAR = 'globstar' as const;
type PatSeg = Seg | typeof GLOBSTAR;
// Segments between globstars (one group: no globstar).
interface Compiled {
  groups: Seg[][];
  min: number;
}

/** Why a pattern cannot be used (null when it can): the message a pipeline error shows. */
export function pathPatternProblem(pattern: string): string | null {
  try {
    compileAll(pattern);
    return null;
  } catch (error) {
    if (error instanceof PathPatternError) return error.message;
    throw error;
  }
}

/**
 * A matcher for a list of patterns: true when a path matches any (or, with
 * `under`, lies under a directory that one matches). Throws PathPatternError.
 */
export function pathMatcher(
  patterns: readonly string[],
  budget: MatchBudget,
  opts: { under?: boolean } = {},
): (path: string) => boolean {
  const compiled = patterns.flatMap((pattern) =>
    compileAll(pattern).map((c) => (opts.under ? underIt(c) : c)),
  );
  return (path) => {
    if (path === '' || path.length > MAX_MATCHED_PATH) return false;
    const segs = path.split('/');
    return compiled.some((pattern) => matchPath(pattern, segs, budget));
  };
}

// `dist` as `dist/**`: a trailing globstar (zero segments included).
function underIt(c: Compiled): Compiled {
  return c.groups.length > 1 && c.groups.at(-1)?.length === 0
    ? c
    : { groups: [...c.groups, []], min: c.min };
}

function compileAll(pattern: string): Compiled[] {
  refuseSyntax(pattern);
  let wildcards = 0;
  for (let i = 0; i < pattern.length; i++) {
    const c = pattern[i];
    if (c === '\\') i++;
    else if (c === '?' || c === '[') wildcards++;
    else if (c === '*' && pattern[i - 1] !== '*') wildcards++;
  }
  if (wildcards > MAX_WILDCARDS) {
    throw new PathPatternError(
      `a path pattern may hold at most ${MAX_WILDCARDS} wildcards (*, **, ?, [...]), this one has ${wildcards}`,
    );
  }
  // `./src/**` is `src/**`, as picomatch reads it.
  return expandBraces(pattern).map((p) => compileOne(p.replace(/^(?:\.\/)+/, '')));
}

// Extglobs (`*(a)`, `+(a)`, `?(a)`, `@(a)`, `!(a)`) and groups are what
// picomatch runs as backtracking regular expressions; they are refused, not
// taken as literal characters, so no pattern silently changes its meaning.
function refuseSyntax(pattern: string): void {
  let depth = 0;
  for (let i = 0; i < pattern.length; i++) {
    const c = pattern[i];
    if (c === '\\') {
      i++;
      continue;
    }
    if (c === '{') depth++;
    else if (c === '}' && depth > 0) depth--;
    else if (c === '(' || c === ')') {
      const ext = c === '(' && i > 0 && '*+?@!'.includes(pattern[i - 1] ?? '');
      throw new PathPatternError(
        ext
          ? `extglob syntax (${pattern.slice(i - 1, i + 1)}...) is not supported in path patterns; write \\( to match a parenthesis`
          : `parentheses are not supported in path patterns; write \\${c} to match one`,
      );
    } else if (c === '|' && depth === 0) {
      throw new PathPatternError(
        'a | outside braces is not supported in path patterns; use {a,b}, or \\| to match one',
      );
    }
  }
}

// `{a,b}` (nested too) becomes one pattern per alternative; `{a}` without a
// comma, and an unclosed `{`, are literal; `{1..3}` ranges are refused.
function expandBraces(pattern: string): string[] {
  const out: string[] = [];
  const pending = [pattern];
  while (pending.length > 0) {
    const p = pending.pop() as string;
    const brace = firstBrace(p);
    if (brace === null) {
      out.push(p);
    } else {
      for (const alt of brace.alternatives) {
        pending.push(p.slice(0, brace.start) + alt + p.slice(brace.end + 1));
      }
    }
    if (out.length + pending.length > MAX_BRACE_EXPANSIONS) {
      throw new PathPatternError(
        `a path pattern's braces may make at most ${MAX_BRACE_EXPANSIONS} patterns`,
      );
    }
  }
  return out.reverse();
}

function firstBrace(p: string): { start: number; end: number; alternatives: string[] } | null {
  for (let start = 0; start < p.length; start++) {
    if (p[start] === '\\') {
      start++;
      continue;
    }
    if (p[start] !== '{') continue;
    let depth = 0;
    const commas: number[] = [];
    for (let i = start; i < p.length; i++) {
      const c = p[i];
      if (c === '\\') i++;
      else if (c === '{') depth++;
      else if (c === ',' && depth === 1) commas.push(i);
      else if (c === '}' && --depth === 0) {
        if (commas.length === 0) {
          if (/^\{[^{}]*\.\.[^{}]*\}$/.test(p.slice(start, i + 1))) {
            throw new PathPatternError(
              `brace ranges (${p.slice(start, i + 1)}) are not supported in path patterns; list the values: {a,b,c}`,
            );
          }
          break;
        }
        const cuts = [start, ...commas, i];
        const alternatives = cuts.slice(1).map((cut, k) => p.slice((cuts[k] as number) + 1, cut));
        return { start, end: i, alternatives };
      }
    }
  }
  return null;
}

function compileOne(pattern: string): Compiled {
  const segs: PatSeg[] = [];
  for (const raw of splitSegments(pattern)) {
    if (raw === '**') {
      if (segs.at(-1) !== GLOBSTAR) segs.push(GLOBSTAR);
    } else {
      segs.push(compileSegment(raw));
    }
  }
  const groups: Seg[][] = [[]];
  for (const seg of segs) {
    if (seg === GLOBSTAR) groups.push([]);
    else groups.at(-1)?.push(seg);
  }
  return { groups, min: groups.reduce((n, g) => n + g.length, 0) };
}

// Splits at `/` that is not escaped; an escaped one stays `\/` for compileSegment.
function splitSegments(pattern: string): string[] {
  const out: string[] = [];
  let current = '';
  for (let i = 0; i < pattern.length; i++) {
    const c = pattern[i] as string;
    if (c === '\\' && i + 1 < pattern.length) {
      current += c + pattern[++i];
    } else if (c === '/') {
      out.push(current);
      current = '';
    } else {
      current += c;
    }
  }
  out.push(current);
  return out;
}

function compileSegment(raw: string): Seg {
  const chunks: Tok[][] = [[]];
  const push = (tok: Tok) => chunks.at(-1)?.push(tok);
  for (let i = 0; i < raw.length; i++) {
    const c = raw[i] as string;
    if (c === '\\' && i + 1 < raw.length) {
      push(raw.charCodeAt(++i));
    } else if (c === '*') {
      // `a**b` within a segment is one star, as in picomatch.
      if (raw[i - 1] !== '*' || raw[i - 2] === '\\') chunks.push([]);
    } else if (c === '?') {
      push('any');
    } else if (c === '[') {
      const cls = parseClass(raw, i);
      if (cls === null) push(c.charCodeAt(0));
      else {
        push(cls.tok);
        i = cls.end;
      }
    } else {
      push(c.charCodeAt(0));
    }
  }
  return { chunks, min: chunks.reduce((n, chunk) => n + chunk.length, 0) };
}

// `[abc]`, `[a-z]`, `[!a]`, `[^a]`, `]` first is a member; an unclosed `[` is
// literal (null). POSIX classes (`[[:alpha:]]`) are refused.
function parseClass(raw: string, open: number): { tok: Tok; end: number } | null {
  let i = open + 1;
  const neg = raw[i] === '!' || raw[i] === '^';
  if (neg) i++;
  const ranges: number[] = [];
  let first = true;
  for (; i < raw.length; i++) {
    let c = raw[i] as string;
    if (c === ']' && !first) return { tok: { neg, ranges }, end: i };
    first = false;
    if (c === '[' && raw[i + 1] === ':') {
      throw new PathPatternError('POSIX classes ([[:alpha:]]) are not supported in path patterns');
    }
    if (c === '\\' && i + 1 < raw.length) c = raw[++i] as string;
    const lo = c.charCodeAt(0);
    if (raw[i + 1] === '-' && i + 2 < raw.length && raw[i + 2] !== ']') {
      let hi = raw[i + 2] as string;
      i += 2;
      if (hi === '\\' && i + 1 < raw.length) hi = raw[++i] as string;
      ranges.push(lo, hi.charCodeAt(0));
    } else {
      ranges.push(lo, lo);
    }
  }
  return null;
}

function tokMatches(tok: Tok, code: number): boolean {
  if (typeof tok === 'number') return tok === code;
  if (tok === 'any') return true;
  let inside = false;
  for (let k = 0; k < tok.ranges.length; k += 2) {
    if (code >= (tok.ranges[k] as number) && code <= (tok.ranges[k + 1] as number)) {
      inside = true;
      break;
    }
  }
  return inside !== tok.neg;
}

function chunkAt(chunk: Tok[], text: string, at: number, budget: MatchBudget): boolean {
  budget.spend(chunk.length + 1);
  for (let k = 0; k < chunk.length; k++) {
    if (!tokMatches(chunk[k] as Tok, text.charCodeAt(at + k))) return false;
  }
  return true;
}

function matchSegment(seg: Seg, text: string, budget: MatchBudget): boolean {
  const { chunks } = seg;
  if (chunks.length === 1) {
    return text.length === seg.min && chunkAt(chunks[0] as Tok[], text, 0, budget);
  }
  return placeChunks(chunks, text.length, seg.min, (chunk, at) => chunkAt(chunk, text, at, budget));
}

function matchPath(pattern: Compiled, segs: string[], budget: MatchBudget): boolean {
  const fits = (group: Seg[], at: number) => {
    budget.spend(1);
    return group.every((seg, k) => matchSegment(seg, segs[at + k] as string, budget));
  };
  if (pattern.groups.length === 1) {
    return segs.length === pattern.min && fits(pattern.groups[0] as Seg[], 0);
  }
  return placeChunks(pattern.groups, segs.length, pattern.min, fits);
}

// The first part at the start, the last at the end, each one between at its
// leftmost fit after the one before: what lies between parts is a wildcard's,
// so the leftmost fit never loses a match, and no fit is tried twice.
function placeChunks<T>(
  parts: T[][],
  length: number,
  min: number,
  fitsAt: (part: T[], at: number) => boolean,
): boolean {
  if (length < min) return false;
  const first = parts[0] as T[];
  const last = parts[parts.length - 1] as T[];
  const end = length - last.length;
  if (!fitsAt(first, 0) || !fitsAt(last, end)) return false;
  let pos = first.length;
  for (let k = 1; k < parts.length - 1; k++) {
    const part = parts[k] as T[];
    let at = pos;
    while (at + part.length <= end && !fitsAt(part, at)) at++;
    if (at + part.length > end) return false;
    pos = at + part.length;
  }
  return true;
}
