import assert from 'node:assert/strict';
import {
  type CompiledPipeline,
  type CompileResult,
  compilePipeline,
  type IncludedFiles,
  needsFiles,
  PipelineError,
  type PipelineIssue,
  type Trigger,
} from '../../lib/pipeline/index.ts';

export const PUSH_MAIN: Trigger = { ref: 'refs/heads/main', event: 'push' };

/** Strips the indentation common to every line, so tests can write YAML inline. */
export function yaml(strings: TemplateStringsArray, ...values: unknown[]): string {
  const text = String.raw({ raw: strings }, ...values).replace(/^\n/, '');
  const indents = text
    .split('\n')
    .filter((line) => line.trim() !== '')
    .map((line) => line.length - line.trimStart().length);
  const cut = Math.min(...indents);
  return text
    .split('\n')
    .map((line) => line.slice(cut))
    .join('\n')
    .replace(/[ ]+$/, '');
}

/** The pipeline a compile gave; fails if it asked for included files instead. */
export function compiled(result: CompileResult): CompiledPipeline {
  if (needsFiles(result)) assert.fail(`the compile asked for ${result.toRead.join(', ')}`);
  return result;
}

/** Compiles a pipeline that must compile (with its included files, when it has any). */
export function compile(
  text: string,
  trigger: Trigger = PUSH_MAIN,
  files?: IncludedFiles,
): CompiledPipeline {
  return compiled(compilePipeline(text, trigger, files));
}

/** Compiles a pipeline that must be rejected, and returns the issues it was rejected with. */
export function issuesOf(
  text: string,
  trigger: Trigger = PUSH_MAIN,
  files?: IncludedFiles,
): PipelineIssue[] {
  try {
    const result = compilePipeline(text, trigger, files);
    if (needsFiles(result)) assert.fail(`the compile asked for ${result.toRead.join(', ')}`);
  } catch (error) {
    assert.ok(error instanceof PipelineError, `expected a PipelineError, got ${String(error)}`);
    return error.issues;
  }
  assert.fail('expected the pipeline to be rejected');
}

/** The single issue a pipeline is rejected with. */
export function onlyIssue(
  text: string,
  trigger: Trigger = PUSH_MAIN,
  files?: IncludedFiles,
): PipelineIssue {
  const issues = issuesOf(text, trigger, files);
  assert.equal(issues.length, 1, `expected one issue, got:\n${issues.map(show).join('\n')}`);
  return issues[0] as PipelineIssue;
}

/** An issue as `LINE:COLUMN path: message`, for compact assertions; `FILE:LINE:COLUMN …` in an included file. */
export function show(issue: PipelineIssue): string {
  const file = issue.file === undefined ? '' : `${issue.file}:`;
  return `${file}${issue.line}:${issue.column} ${issue.path}: ${issue.message}`;
}
