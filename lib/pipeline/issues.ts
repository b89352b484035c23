import type { LineCounter } from 'yaml';
import { MAX_REPORTED_ISSUES, PIPELINE_FILE } from './limits.ts';

/** One problem in a pipeline file, at the 1-based line and column of the YAML node it concerns. */
export interface PipelineIssue {
  line: number;
  column: number;
  /** Where in the document, like `tasks.build.needs[1]`; '' for the document itself. */
  path: string;
  message: string;
  /** The file, for a problem in a file that `include:` read; absent for the pipeline file itself. */
  file?: string;
}

/** A key or a list index on the way from the document root to a node. */
export type PathSegment = string | number;

/** Renders an issue as `.conductor.yml:LINE:COLUMN: path: message`, or with the included file it is in. */
export function formatIssue(issue: PipelineIssue, file: string = PIPELINE_FILE): string {
  const where = issue.path === '' ? '' : `${issue.path}: `;
  return `${issue.file ?? file}:${issue.line}:${issue.column}: ${where}${issue.message}`;
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

/** One file of a compile: where its offsets start, and how to turn them into lines. */
export interface SourceFile {
  /** The path from the repository root; null for the pipeline file itself. */
  name: string | null;
  /** Offsets in this file's text are `base` higher in every Loc and issue. */
  base: number;
  lines: LineCounter;
}

/**
 * Collects issues by source offset and turns them into line/column positions. At most
 * MAX_REPORTED_ISSUES are reported, the first in file order of those kept; a last issue says how
 * many more were found, so a failed job never stores megabytes of errors.
 *
 * The files of one compile (the pipeline file, then each file `include:` read) share one offset
 * space, each starting past the end of the one before (`addFile`), so every location the
 * compiler keeps is a plain number and still says which file it is in.
 */
export class IssueList {
  readonly #files: SourceFile[] = [];
  readonly #issues: PipelineIssue[] = [];
  readonly #order: number[] = [];
  readonly #seen = new Set<string>();
  #dropped = 0;
  #end = 0;

  /** Registers the next file of `length` characters and answers where its offsets start. */
  addFile(name: string | null, length: number, lines: LineCounter): SourceFile {
    // One past the previous file's end: an offset at the very end of a file stays in it.
    const base = this.#files.length === 0 ? 0 : this.#end + 1;
    const file = { name, base, lines };
    this.#files.push(file);
    this.#end = base + length;
    return file;
  }

  get size(): number {
    return this.#issues.length + this.#dropped;
  }

  #fileAt(offset: number): { file: SourceFile | null; index: number } {
    for (let i = this.#files.length - 1; i >= 0; i--) {
      const file = this.#files[i];
      if (file && offset >= file.base) return { file, index: i };
    }
    return { file: null, index: 0 };
  }

  /** Where an offset is, as `file:LINE:COLUMN`, for messages that point at a second place. */
  where(offset: number): string {
    const { file } = this.#fileAt(Math.max(0, offset));
    const position = file?.lines.linePos(Math.max(0, offset - file.base)) ?? { line: 1, col: 1 };
    return `${file?.name ?? PIPELINE_FILE}:${Math.max(1, position.line)}:${Math.max(1, position.col)}`;
  }

  add(offset: number, path: readonly PathSegment[], message: string): void {
    const { file, index } = this.#fileAt(Math.max(0, offset));
    const local = Math.max(0, offset - (file?.base ?? 0));
    const position = file?.lines.linePos(local) ?? { line: 1, col: 1 };
    const issue: PipelineIssue = {
      // LineCounter reports line 0 for offsets before the first line it saw; clamp to the contract.
      line: Math.max(1, position.line),
      column: Math.max(1, position.col),
      path: formatPath(path),
      message,
    };
    if (file?.name) issue.file = file.name;
    // An anchor used many times repeats its problems exactly; each is reported once.
    const key = `${index}:${issue.line}:${issue.column}:${issue.path}:${issue.message}`;
    if (this.#seen.has(key)) return;
    if (this.#issues.length >= MAX_KEPT_ISSUES) {
      this.#dropped++;
      return;
    }
    this.#seen.add(key);
    this.#issues.push(issue);
    this.#order.push(index);
  }

  /** The issues in file order, without exact repeats, as the error to throw. */
  toError(): PipelineError {
    // File by file in the order they were read, then by position.
    const unique = this.#issues
      .map((issue, i) => ({ issue, file: this.#order[i] ?? 0 }))
      .sort(
        (a, b) => a.file - b.file || a.issue.line - b.issue.line || a.issue.column - b.issue.column,
      )
      .map(({ issue }) => issue);
    const more = unique.length - MAX_REPORTED_ISSUES + this.#dropped;
    const reported = unique.slice(0, MAX_REPORTED_ISSUES);
    const next = unique[MAX_REPORTED_ISSUES] ?? reported.at(-1);
    if (more > 0) {
      reported.push({
        line: next?.line ?? 1,
        column: next?.column ?? 1,
        path: '',
        message: `${more} more problem${more === 1 ? '' : 's'} not shown; at most ${MAX_REPORTED_ISSUES} problems are reported`,
        ...(next?.file ? { file: next.file } : {}),
      });
    }
    return new PipelineError(reported);
  }
}
