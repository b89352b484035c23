export { formatDuration } from '../duration.ts';
export { cancelJob, cancelJobsTx, cancelPullRequest } from './cancel.ts';
export {
  CLAIMED_COLUMNS,
  type ClaimedTask,
  type ClaimOptions,
  claimTask,
  releaseClaim,
} from './claim.ts';
export {
  type Completion,
  type CompletionResult,
  completeSuccessByToken,
  completeTask,
  type HeartbeatResult,
  heartbeat,
  type SuccessByToken,
} from './complete.ts';
export {
  type CreatedJob,
  countCompileAttempt,
  createJob,
  failJob,
  getJob,
  type NewJob,
  noteCompileError,
  type StartResult,
  startJob,
} from './jobs.ts';
export { enqueueStatus, shortDescription } from './outbox.ts';
export { type FollowUpResult, followUp, settleJobAfterCommit } from './progress.ts';
export { type RerunResult, rerunJob } from './rerun.ts';
export { purgeExpired, type RetentionOptions, type RetentionSummary } from './retention.ts';
export { type SweepOptions, type SweepSummary, sweep } from './sweep.ts';
export {
  countLogLines,
  type LogPage,
  MAX_LOG_PAGE_BYTES,
  readLog,
} from './task-log.ts';
export { approveJob, settleJobTrust } from './trust.ts';
export * from './types.ts';
export { getJobOnly, getJobView, type JobView, listJobs, type TaskView } from './views.ts';
