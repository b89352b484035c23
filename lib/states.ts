// The single source of every enumerated value the schema constrains. The
// migrations' CHECK constraints (on tasks and task_attempts, the domains of
// migration 019, under the same names) list the same values; test/db/schema.test.ts
// reads them back from the catalog and fails if the two drift apart.

/** `blocked`: an untrusted job waiting for approval, before its pipeline file is read. */
export const JOB_STATES = [
  'pending',
  'blocked',
  'running',
  'success',
  'failed',
  'cancelled',
] as const;
export type JobState = (typeof JOB_STATES)[number];
/** States of a job that can still change on its own or by approval; cancel and superseding act on these. */
export const UNFINISHED_JOB_STATES = [
  'pending',
  'blocked',
  'running',
] as const satisfies readonly JobState[];
export const FINISHED_JOB_STATES = [
  'success',
  'failed',
  'cancelled',
] as const satisfies readonly JobState[];

/** `blocked`: a block step waiting to be unblocked (its needs met); not the job's `blocked`. */
export const TASK_STATES = [
  'waiting',
  'queued',
  'running',
  'blocked',
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
  'blocked',
] as const satisfies readonly TaskState[];

/** `schedule`: fired by one of the project's schedules (migrations/012). */
export const JOB_TRIGGERS = ['push', 'tag', 'pull_request', 'manual', 'rerun', 'schedule'] as const;
export type JobTrigger = (typeof JOB_TRIGGERS)[number];

/** A task's `when:` (tasks.run_when, migrations/012): which outcomes of its needs let it run. */
export const TASK_RUN_WHEN = ['on_success', 'on_failure', 'always'] as const;
export type TaskRunWhen = (typeof TASK_RUN_WHEN)[number];

/** What a schedule does with ticks missed while nothing fired (schedules.catch_up). */
export const SCHEDULE_CATCH_UP = ['latest', 'none'] as const;
export type ScheduleCatchUp = (typeof SCHEDULE_CATCH_UP)[number];

export const FORGES = ['github', 'gitea', 'gitlab'] as const;
export type Forge = (typeof FORGES)[number];
/** The forge of a project that names none (the CLI's `project create` without `--forge`). */
export const DEFAULT_FORGE: Forge = 'github';

/** What a project does with an untrusted job: hold it in `blocked` for approval, run it at once, or not create it. */
export const FORK_PULL_REQUEST_POLICIES = ['approve', 'run', 'ignore'] as const;
export type ForkPullRequestPolicy = (typeof FORK_PULL_REQUEST_POLICIES)[number];

/**
 * What a project makes of a bot's pull request, or a bot's push to a branch
 * other than the default (projects.bot_pull_requests, whose CHECK in
 * migrations/008 lists the same values): `untrusted` (the default) treats it
 * as a fork's, `trusted` as a branch's of the repository.
 */
export const BOT_PULL_REQUEST_POLICIES = ['untrusted', 'trusted'] as const;
export type BotPullRequestPolicy = (typeof BOT_PULL_REQUEST_POLICIES)[number];

/** Who may read a project's pages: signed-in people only, or anyone. */
export const VISIBILITIES = ['private', 'public'] as const;
export type Visibility = (typeof VISIBILITIES)[number];

/** How an attempt ended; `lost` is a lease that expired, `timed_out` a task past its timeout. */
export const ATTEMPT_OUTCOMES = ['success', 'failed', 'cancelled', 'lost', 'timed_out'] as const;
export type AttemptOutcome = (typeof ATTEMPT_OUTCOMES)[number];

/** Commit-status states as the forges name them (Gitea also knows `warning`). */
export const STATUS_STATES = ['pending', 'success', 'failure', 'error', 'warning'] as const;
export type StatusState = (typeof STATUS_STATES)[number];

/** How an outbox row ended: posted, replaced by a newer one before it was, or abandoned. */
export const STATUS_RESULTS = ['delivered', 'superseded', 'gave_up'] as const;
export type StatusResult = (typeof STATUS_RESULTS)[number];

/** Runner pools' providers (migrations/023): child processes here, or Fargate tasks. */
export const POOL_PROVIDERS = ['process', 'ecs'] as const;
export type PoolProvider = (typeof POOL_PROVIDERS)[number];

/**
 * A pool's launch (migrations/023): `pending` is decided and not yet carried
 * out (or being retried after a failure), `started` the provider accepted it,
 * `ended` its runner is gone or no longer wanted (its worker revoked).
 */
export const LAUNCH_STATES = ['pending', 'started', 'ended'] as const;
export type LaunchState = (typeof LAUNCH_STATES)[number];

/** Where a notification goes (notifications.kind, migrations/024). */
export const NOTIFICATION_KINDS = ['webhook', 'slack', 'email'] as const;
export type NotificationKind = (typeof NOTIFICATION_KINDS)[number];

/** When a notification is sent (notifications.on_events): a failed job, the first success after a failure on its ref, every finished job. */
export const NOTIFICATION_EVENTS = ['failed', 'fixed', 'always'] as const;
export type NotificationEvent = (typeof NOTIFICATION_EVENTS)[number];

/** How a notification's outbox row ended (notification_outbox.result; null while due). */
export const NOTIFICATION_RESULTS = ['delivered', 'skipped', 'gave_up'] as const;
export type NotificationResult = (typeof NOTIFICATION_RESULTS)[number];
