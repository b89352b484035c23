// What a runner reports as it works, for whoever embeds it (the demo prints these).

/** The fields every task event carries. */
export interface TaskRef {
  task_id: string;
  job_id: string;
  name: string;
  attempt: number;
}

export type RunnerEvent =
  | ({ type: 'task-started'; max_attempts: number } & TaskRef)
  | ({ type: 'log-chunk'; offset: number; data: string } & TaskRef)
  | ({
      type: 'task-finished';
      /** What the runner reported; `lost` when nothing could be reported (the lease was lost). */
      outcome: 'success' | 'failed' | 'cancelled' | 'lost';
      /** The task's state as the control plane answered it (null when not reported). */
      state: string | null;
      /** The job's final state when this completion finished the job, else null. */
      job_state: string | null;
      exit_code: number | null;
      transient: boolean;
      error: string | null;
      duration_ms: number;
    } & TaskRef);

export type LogLevel = 'info' | 'warn' | 'error';
/** Where the runner's own structured lines go (stderr, by default). */
export type Logger = (level: LogLevel, message: string, fields?: Record<string, unknown>) => void;
