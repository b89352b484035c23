export {
  type CompiledPipeline,
  type CompiledTask,
  compilePipeline,
  type PipelineCompiler,
} from './compile.ts';
export { refMatches, type Trigger } from './glob.ts';
export { formatIssue, PipelineError, type PipelineIssue } from './issues.ts';
export { MAX_PIPELINE_BYTES, MAX_TASKS, PIPELINE_FILE } from './limits.ts';
export { envFragment } from './names.ts';
