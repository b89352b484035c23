// The single source of every enumerated value the schema constrains. The first
// migration's CHECK constraints list the same values; test/db/schema.test.ts
// reads them back from the catalog and fails if the two drift apart.

export const JOB_STATES = ['pending', 'running', 'success', 'failed', 'cancelled'] as const;
export type JobState = (typeof JOB_STATES)[number];
export const FINISHED_JOB_STATES = [
  'success',
  'failed',
  'cancelled',
] as const satisfies readonly JobState[];

export const TASK_STATES = [
  'waiting',
  'queued',
  'running',
  'success',
  'failed',
  'skipped',
  'cancelled',
] as const;
export type TaskState = (typeof TASK_STATES)[number];
/** States from which a task can still make progress; a job with none of these left is ready to settle. */
export const UNFINISHED_TASK_STATES = [
  'waiting',
  'queued',
  'running',
] as const satisfies readonly TaskState[];

export const JOB_TRIGGERS = ['push', 'tag', 'pull_request', 'manual', 'rerun'] as const;
export type JobTrigger = (typeof JOB_TRIGGERS)[number];

export const FORGES = ['github', 'gitea'] as const;
export type Forge = (typeof FORGES)[number];

/** How an attempt ended; `lost` is a lease that expired, `timed_out` a task past its timeout. */
export const ATTEMPT_OUTCOMES = ['success', 'failed', 'cancelled', 'lost', 'timed_out'] as const;
export type AttemptOutcome = (typeof ATTEMPT_OUTCOMES)[number];

/** Commit-status states as the forges name them (Gitea also knows `warning`). */
export const STATUS_STATES = ['pending', 'success', 'failure', 'error', 'warning'] as const;
export type StatusState = (typeof STATUS_STATES)[number];

/** How an outbox row ended: posted, replaced by a newer one before it was, or abandoned. */
export const STATUS_RESULTS = ['delivered', 'superseded', 'gave_up'] as const;
export type StatusResult = (typeof STATUS_RESULTS)[number];
