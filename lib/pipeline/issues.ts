import type { LineCounter } from 'yaml';
import { MAX_REPORTED_ISSUES, PIPELINE_FILE } from './limits.ts';

/** One problem in a pipeline file, at the 1-based line and column of the YAML node it concerns. */
export interface PipelineIssue {
  line: number;
  column: number;
  /** Where in the document, like `tasks.build.needs[1]`; '' for the document itself. */
  path: string;
  message: string;
}

/** A key or a list index on the way from the document root to a node. */
export type PathSegment = string | number;

/** Renders an issue as `.conductor.yml:LINE:COLUMN: path: message`. */
export function formatIssue(issue: PipelineIssue, file: string = PIPELINE_FILE): string {
  const where = issue.path === '' ? '' : `${issue.path}: `;
  return `${file}:${issue.line}:${issue.column}: ${where}${issue.message}`;
}

/** The only error the compiler throws: every problem found in the file, one per line of the message. */
export class PipelineError extends Error {
  readonly issues: PipelineIssue[];
  constructor(issues: PipelineIssue[], options?: ErrorOptions) {
    super(issues.map((issue) => formatIssue(issue)).join('\n'), options);
    this.name = 'PipelineError';
    this.issues = issues;
  }
}

const PLAIN_KEY = /^[A-Za-z0-9_-]+$/;

/** Renders a path as `tasks.build.needs[1]`, quoting keys that are not plain words: `tasks["v1.2"]`. */
export function formatPath(path: readonly PathSegment[]): string {
  let out = '';
  for (const segment of path) {
    if (typeof segment === 'number') out += `[${segment}]`;
    else if (PLAIN_KEY.test(segment)) out += out === '' ? segment : `.${segment}`;
    else out += `[${JSON.stringify(segment)}]`;
  }
  return out;
}

// A 1 MiB file can hold hundreds of thousands of problems; past this many only their number is
// kept, so the list itself cannot grow with the file.
const MAX_KEPT_ISSUES = 100 * MAX_REPORTED_ISSUES;

/**
 * Collects issues by source offset and turns them into line/column positions. At most
 * MAX_REPORTED_ISSUES are reported, the first in file order of those kept; a last issue says how
 * many more were found, so a failed job never stores megabytes of errors.
 */
export class IssueList {
  readonly #lines: LineCounter | null;
  readonly #issues: PipelineIssue[] = [];
  readonly #seen = new Set<string>();
  #dropped = 0;

  constructor(lines: LineCounter | null) {
    this.#lines = lines;
  }

  get size(): number {
    return this.#issues.length + this.#dropped;
  }

  add(offset: number, path: readonly PathSegment[], message: string): void {
    const position = this.#lines?.linePos(Math.max(0, offset)) ?? { line: 1, col: 1 };
    const issue: PipelineIssue = {
      // LineCounter reports line 0 for offsets before the first line it saw; clamp to the contract.
      line: Math.max(1, position.line),
      column: Math.max(1, position.col),
      path: formatPath(path),
      message,
    };
    // An anchor used many times repeats its problems exactly; each is reported once.
    const key = `${issue.line}:${issue.column}:${issue.path}:${issue.message}`;
    if (this.#seen.has(key)) return;
    if (this.#issues.length >= MAX_KEPT_ISSUES) {
      this.#dropped++;
      return;
    }
    this.#seen.add(key);
    this.#issues.push(issue);
  }

  /** The issues in file order, without exact repeats, as the error to throw. */
  toError(): PipelineError {
    const unique = [...this.#issues];
    unique.sort((a, b) => a.line - b.line || a.column - b.column);
    const more = unique.length - MAX_REPORTED_ISSUES + this.#dropped;
    const reported = unique.slice(0, MAX_REPORTED_ISSUES);
    const next = unique[MAX_REPORTED_ISSUES];
    if (more > 0) {
      reported.push({
        line: next?.line ?? reported.at(-1)?.line ?? 1,
        column: next?.column ?? reported.at(-1)?.column ?? 1,
        path: '',
        message: `${more} more problem${more === 1 ? '' : 's'} not shown; at most ${MAX_REPORTED_ISSUES} problems are reported`,
      });
    }
    return new PipelineError(reported);
  }
}
