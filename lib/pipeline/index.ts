export {
  CHANGES_MATCH_STEPS,
  type CompiledChanges,
  changesMatch,
  changesSkipReason,
  describeChanges,
} from './changes.ts';
export {
  type CompiledBlock,
  type CompiledBlockField,
  type CompiledPipeline,
  type CompiledService,
  type CompiledStorage,
  type CompiledTask,
  type CompileResult,
  compilePipeline,
  type FilesToRead,
  needsFiles,
  type PipelineCompiler,
} from './compile.ts';
export type { CompiledConcurrency, ConcurrencyMode } from './concurrency.ts';
export { refMatches, type Trigger } from './glob.ts';
export type { IncludedFile, IncludedFiles } from './include.ts';
export { formatIssue, PipelineError, type PipelineIssue } from './issues.ts';
export {
  MAX_INCLUDE_DEPTH,
  MAX_INCLUDE_ROUNDS,
  MAX_PIPELINE_BYTES,
  MAX_TASKS,
  PIPELINE_FILE,
  unsettledIncludes,
} from './limits.ts';
export { envFragment } from './names.ts';
export { MatchBudget, MatchBudgetError } from './pathglob.ts';
