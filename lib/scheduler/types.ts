import type {
  CompiledBlock,
  CompiledService,
  CompiledStorage,
  CompiledTask,
} from '../pipeline/index.ts';
import type { AttemptOutcome, JobState, JobTrigger, TaskRunWhen, TaskState } from '../states.ts';

/** A job as stored; field names are the API's. */
export interface JobRow {
  id: string;
  project_id: string;
  number: number;
  state: JobState;
  trigger: JobTrigger;
  ref: string;
  sha: string;
  base_ref: string | null;
  pull_request: number | null;
  delivery_id: string | null;
  /** SHA-256 of the raw webhook body that created the job (replays are found by it). */
  body_sha256: Buffer | null;
  trusted: boolean;
  /** Logins whose write access the compile must confirm before trusting the job; null once settled. */
  confirm_writers: string[] | null;
  /** Why the job is trusted or not. */
  trust_reason: string | null;
  /** When an admin let a blocked job go on. */
  approved_at: Date | null;
  rerun_of: string | null;
  /** A push's commit before it (all zeros when it made the branch); null for other triggers (migrations/013). */
  push_before: string | null;
  push_forced: boolean;
  push_created: boolean;
  /** Files the push payload's commits list, when that list is complete; else null. */
  payload_files: string[] | null;
  /** What the changes: filters were decided on: `before..after`, `base...head`, or null when unknown. */
  diff_base: string | null;
  /** The first 100 changed files. */
  diff_files: string[] | null;
  diff_count: number | null;
  /** Why the diff is unknown (every task ran), or where the file list came from. */
  diff_note: string | null;
  pipeline_name: string | null;
  /** What a manual or scheduled run was given for `inputs:` (migrations/012). */
  inputs: Record<string, unknown> | null;
  /** The schedule that fired the job. */
  schedule_name: string | null;
  /** The inputs the pipeline declared as the job compiled it (the Run form's fields). */
  declared_inputs: unknown[] | null;
  error: string | null;
  errors: JobErrorEntry[] | null;
  compile_attempts: number;
  dispatched_at: Date | null;
  created_at: Date;
  started_at: Date | null;
  finished_at: Date | null;
}

export interface JobErrorEntry {
  line: number;
  column: number;
  path: string;
  message: string;
}

/** A task as stored. */
export interface TaskRow {
  id: string;
  job_id: string;
  position: number;
  name: string;
  base_name: string;
  matrix: Record<string, string>;
  image: string | null;
  script: string[];
  env: Record<string, string>;
  labels: string[];
  needs: string[];
  secrets: string[];
  outputs: string[];
  state: TaskState;
  /** The job's trust, copied: which pool of workers may claim the task. */
  trusted: boolean;
  attempt: number;
  max_attempts: number;
  lease_id: string | null;
  worker_id: string | null;
  lease_expires_at: Date | null;
  allow_failure: boolean;
  /** `when:` (migrations/012). */
  run_when: TaskRunWhen;
  timeout_s: number;
  /** How long the task may wait queued before it fails for want of a worker (migrations/005). */
  queue_timeout_s: number;
  /** A failed expansion of its matrix cancels its siblings (migrations/009). */
  fail_fast: boolean;
  /** The service containers to start beside the script (migrations/010). */
  services: CompiledService[];
  /** Its artifacts and caches (migrations/011); {} for none. */
  storage: CompiledStorage;
  /** A block step's prompt and fields; null for a task with a script (migrations/013). */
  block: CompiledBlock | null;
  blocked_at: Date | null;
  /** When a blocked task ends as its on_timeout says (the sweep). */
  block_deadline: Date | null;
  /** Who unblocked it (`admin`, or a signed-in person), and when. */
  unblocked_by: string | null;
  unblocked_at: Date | null;
  /** Left out by its changes: filter; a rerun leaves it out again. */
  path_skipped: boolean;
  /** Its concurrency group as written (lower case), its key (`<project>/<group>` or `org:<name>`), limit and mode; null for none. */
  concurrency_group: string | null;
  concurrency_key: string | null;
  concurrency_limit: number | null;
  concurrency_mode: 'queue' | 'replace_pending' | 'cancel_running' | null;
  cancel_requested: boolean;
  exit_code: number | null;
  error: string | null;
  copied_from: string | null;
  job_created_at: Date;
  created_at: Date;
  queued_at: Date | null;
  started_at: Date | null;
  finished_at: Date | null;
}

export interface AttemptRow {
  task_id: string;
  attempt: number;
  lease_id: string;
  worker_id: string | null;
  reported_outcome: string | null;
  result_state: TaskState | null;
  outcome: AttemptOutcome | null;
  transient: boolean | null;
  exit_code: number | null;
  error: string | null;
  log_size: number;
  started_at: Date;
  finished_at: Date | null;
}

/** What a task needs to be inserted: the compiler's output, or a copy of an earlier job's task. */
export interface TaskSpec extends CompiledTask {
  /** A failed-only rerun keeps a successful task as it was. */
  kept?: {
    from: string;
    attempt: number;
    exitCode: number | null;
    startedAt: Date | null;
    finishedAt: Date | null;
  };
  /** Stored skipped with this reason (its changes: matched no changed file; migrations/013). */
  pathSkipped?: string;
}

/** Scheduler settings; every field has a default. */
export interface SchedulerOptions {
  /** Seconds a claim or heartbeat holds a task. */
  leaseS?: number;
  /** Retries of a claim that keeps hitting 40001 before it answers "nothing". */
  claimRetries?: number;
}

export const DEFAULT_LEASE_S = 45;
