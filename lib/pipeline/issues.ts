import type { LineCounter } from 'yaml';
import { PIPELINE_FILE } from './limits.ts';

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

/** Collects issues by source offset and turns them into line/column positions. */
export class IssueList {
  readonly #lines: LineCounter | null;
  readonly #issues: PipelineIssue[] = [];

  constructor(lines: LineCounter | null) {
    this.#lines = lines;
  }

  get size(): number {
    return this.#issues.length;
  }

  add(offset: number, path: readonly PathSegment[], message: string): void {
    const position = this.#lines?.linePos(Math.max(0, offset)) ?? { line: 1, col: 1 };
    this.#issues.push({
      // LineCounter reports line 0 for offsets before the first line it saw; clamp to the contract.
      line: Math.max(1, position.line),
      column: Math.max(1, position.col),
      path: formatPath(path),
      message,
    });
  }

  /** The issues in file order, without exact repeats, as the error to throw. */
  toError(): PipelineError {
    const seen = new Set<string>();
    const unique = this.#issues.filter((issue) => {
      const key = `${issue.line}:${issue.column}:${issue.path}:${issue.message}`;
      if (seen.has(key)) return false;
      seen.add(key);
      return true;
    });
    unique.sort((a, b) => a.line - b.line || a.column - b.column);
    return new PipelineError(unique);
  }
}
