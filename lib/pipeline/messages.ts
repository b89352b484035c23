import { MAX_SUGGESTED_CHARS, MAX_SUGGESTION_CANDIDATES, MAX_SUGGESTIONS } from './limits.ts';

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

/** What suggestions cost one compile: how many were computed, and the edit-distance cells filled. */
export interface SuggestionCost {
  suggestions: number;
  cells: number;
}

/**
 * Suggests close candidates for misspelt words, within one compile's budget: at most
 * MAX_SUGGESTIONS suggestions, each comparing at most MAX_SUGGESTION_CANDIDATES candidates of at
 * most MAX_SUGGESTED_CHARS characters, and each comparison only near the diagonal. A file with
 * hundreds of unknown needs once cost 30 s of CPU here; now it costs a few milliseconds.
 */
export class Suggester implements SuggestionCost {
  suggestions = 0;
  cells = 0;

  /** ` (did you mean "x"?)` for the closest candidate, or '' when none is close or the budget is spent. */
  suggest(word: string, candidates: Iterable<string>): string {
    if (this.suggestions >= MAX_SUGGESTIONS || word.length > MAX_SUGGESTED_CHARS) return '';
    this.suggestions++;
    let best: string | null = null;
    let bestDistance = Math.min(2, Math.floor(word.length / 3));
    let seen = 0;
    for (const candidate of candidates) {
      if (++seen > MAX_SUGGESTION_CANDIDATES) break;
      if (Math.abs(candidate.length - word.length) > bestDistance) continue;
      const distance = this.#distance(word, candidate, bestDistance);
      if (distance <= bestDistance && distance > 0) {
        best = candidate;
        bestDistance = distance - 1;
      }
    }
    return best === null ? '' : ` (did you mean ${quote(best)}?)`;
  }

  // Levenshtein distance with adjacent transpositions counted as one edit ("scirpt" → "script"),
  // or limit + 1 when it is more than `limit`. Only cells within `limit` of the diagonal can stay
  // within the limit, so only those are filled: a comparison costs length × (2 × limit + 1).
  #distance(a: string, b: string, limit: number): number {
    const over = limit + 1;
    if (Math.abs(a.length - b.length) > limit) return over;
    let before: number[] = new Array(b.length + 1).fill(over);
    let previous: number[] = new Array(b.length + 1).fill(over);
    let current: number[] = new Array(b.length + 1).fill(over);
    for (let j = 0; j <= Math.min(b.length, limit); j++) previous[j] = j;
    for (let i = 1; i <= a.length; i++) {
      const from = Math.max(1, i - limit);
      const to = Math.min(b.length, i + limit);
      // The cells just outside the band are read by the next row: they must say "over".
      current[from - 1] = from === 1 ? Math.min(i, over) : over;
      if (to < b.length) current[to + 1] = over;
      let rowMin = current[from - 1] ?? over;
      for (let j = from; j <= to; j++) {
        const cost = a[i - 1] === b[j - 1] ? 0 : 1;
        let value = Math.min(
          (previous[j] ?? over) + 1,
          (current[j - 1] ?? over) + 1,
          (previous[j - 1] ?? over) + cost,
        );
        if (i > 1 && j > 1 && a[i - 1] === b[j - 2] && a[i - 2] === b[j - 1]) {
          value = Math.min(value, (before[j - 2] ?? over) + 1);
        }
        current[j] = Math.min(value, over);
        rowMin = Math.min(rowMin, value);
      }
      this.cells += to - from + 1;
      if (rowMin > limit) return over;
      [before, previous, current] = [previous, current, before];
    }
    return Math.min(previous[b.length] ?? over, over);
  }
}
