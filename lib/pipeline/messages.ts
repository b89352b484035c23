/** Quotes a user-supplied string for a message, cut short so one huge value cannot flood the error. */
export function quote(text: string): string {
  return JSON.stringify(text.length > 60 ? `${text.slice(0, 60)}…` : text);
}

/** Describes a value the way a user wrote it in YAML: `a list`, `a map`, `null`, `"text"`, `1.5`. */
export function describeValue(value: unknown): string {
  if (value === null) return 'null';
  if (value === undefined) return 'nothing';
  if (Array.isArray(value)) return 'a list';
  switch (typeof value) {
    case 'string':
      return quote(value);
    case 'number':
    case 'boolean':
      return String(value);
    case 'object':
      return 'a map';
    default:
      return typeof value;
  }
}

// Past this many candidates a suggestion is not worth quadratic work on a hostile file.
const MAX_CANDIDATES = 1000;

/** Suggests the closest candidate to a misspelt word, as ` (did you mean "x"?)`, or '' if none is close. */
export function didYouMean(word: string, candidates: Iterable<string>): string {
  let best: string | null = null;
  let bestDistance = Math.min(2, Math.floor(word.length / 3));
  let seen = 0;
  for (const candidate of candidates) {
    if (++seen > MAX_CANDIDATES) break;
    if (Math.abs(candidate.length - word.length) > bestDistance) continue;
    const distance = editDistance(word, candidate, bestDistance);
    if (distance <= bestDistance && distance > 0) {
      best = candidate;
      bestDistance = distance - 1;
    }
  }
  return best === null ? '' : ` (did you mean ${quote(best)}?)`;
}

// Levenshtein distance with adjacent transpositions counted as one edit ("scirpt" → "script"),
// giving up early once every path exceeds `limit`.
function editDistance(a: string, b: string, limit: number): number {
  let before: number[] = [];
  let previous = Array.from({ length: b.length + 1 }, (_, j) => j);
  for (let i = 1; i <= a.length; i++) {
    const current = [i];
    let rowMin = i;
    for (let j = 1; j <= b.length; j++) {
      const cost = a[i - 1] === b[j - 1] ? 0 : 1;
      let value = Math.min(
        (previous[j] ?? 0) + 1,
        (current[j - 1] ?? 0) + 1,
        (previous[j - 1] ?? 0) + cost,
      );
      if (i > 1 && j > 1 && a[i - 1] === b[j - 2] && a[i - 2] === b[j - 1]) {
        value = Math.min(value, (before[j - 2] ?? 0) + 1);
      }
      current.push(value);
      rowMin = Math.min(rowMin, value);
    }
    if (rowMin > limit) return limit + 1;
    before = previous;
    previous = current;
  }
  return previous[b.length] ?? limit + 1;
}
