import assert from 'node:assert/strict';
import {
  type CompiledPipeline,
  compilePipeline,
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

/** Compiles a pipeline that must compile. */
export function compile(text: string, trigger: Trigger = PUSH_MAIN): CompiledPipeline {
  return compilePipeline(text, trigger);
}

/** Compiles a pipeline that must be rejected, and returns the issues it was rejected with. */
export function issuesOf(text: string, trigger: Trigger = PUSH_MAIN): PipelineIssue[] {
  try {
    compilePipeline(text, trigger);
  } catch (error) {
    assert.ok(error instanceof PipelineError, `expected a PipelineError, got ${String(error)}`);
    return error.issues;
  }
  assert.fail('expected the pipeline to be rejected');
}

/** The single issue a pipeline is rejected with. */
export function onlyIssue(text: string, trigger: Trigger = PUSH_MAIN): PipelineIssue {
  const issues = issuesOf(text, trigger);
  assert.equal(issues.length, 1, `expected one issue, got:\n${issues.map(show).join('\n')}`);
  return issues[0] as PipelineIssue;
}

/** An issue as `LINE:COLUMN path: message`, for compact assertions. */
export function show(issue: PipelineIssue): string {
  return `${issue.line}:${issue.column} ${issue.path}: ${issue.message}`;
}
