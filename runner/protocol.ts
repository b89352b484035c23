// What the control plane answers on the runner routes, read leniently: the
// control plane owns these shapes and may add fields.
import { z } from 'zod';

const StringMapSchema = z.record(z.string(), z.string());

/** A container started beside a task's script (docker executor), reached by `name` on the task's network. */
export const ServiceSchema = z.object({
  name: z.string().min(1),
  image: z.string().min(1),
  env: StringMapSchema.default({}),
  ports: z.array(z.number().int()).default([]),
  health: z.string().nullable().default(null),
  health_timeout_s: z.number().positive().default(60),
  /** Replaces the image's CMD; null keeps it. */
  command: z.array(z.string()).nullable().default(null),
  /** Replaces the image's ENTRYPOINT (the first word the program); null keeps it, [] clears it. */
  entrypoint: z.array(z.string()).nullable().default(null),
});
export type Service = z.infer<typeof ServiceSchema>;

/** One attempt of a task, as `POST /v1/runner/claim` hands it out. */
export const TaskSchema = z.object({
  id: z.string().min(1),
  job_id: z.string().min(1),
  name: z.string(),
  lease_id: z.string().min(1),
  attempt: z.number().int(),
  max_attempts: z.number().int(),
  lease_expires_at: z.string(),
  image: z.string().nullable().default(null),
  script: z.array(z.string()),
  env: StringMapSchema.default({}),
  secrets: StringMapSchema.default({}),
  matrix: StringMapSchema.default({}),
  needs_outputs: z.record(z.string(), StringMapSchema).default({}),
  timeout_s: z.number().positive(),
  repo: z.object({
    url: z.string(),
    sha: z.string(),
    ref: z.string(),
    token: z.string().optional(),
  }),
  // Absent from a control plane that predates services: none.
  services: z.array(ServiceSchema).default([]),
  // Absent from a control plane that predates it: then the runner checks nothing.
  trusted: z.boolean().optional(),
  // Artifacts and caches (docs/artifacts.md); absent from a control plane that predates them: none.
  artifacts: z
    .object({
      paths: z.array(z.string()),
      when: z.enum(['on_success', 'on_failure', 'always']).default('on_success'),
    })
    .nullable()
    .optional(),
  caches: z
    .array(
      z.object({
        key: z.string(),
        restore_keys: z.array(z.string()).default([]),
        paths: z.array(z.string()),
        policy: z.enum(['pull', 'push', 'pull-push']).default('pull-push'),
      }),
    )
    .optional(),
  // Test reports (docs/pipeline.md#reports-test-results); absent from a control plane that predates them: none.
  reports: z
    .object({ junit: z.array(z.string()) })
    .nullable()
    .optional(),
});
export type Task = z.infer<typeof TaskSchema>;

export const ClaimAnswerSchema = z.object({ task: z.unknown() });

export const HeartbeatAnswerSchema = z.object({
  lease_expires_at: z.string(),
  cancel: z.boolean(),
});

export const LogAnswerSchema = z.object({ size: z.number().int().min(0) });

export const CompleteAnswerSchema = z.object({
  state: z.string(),
  job_state: z.string().nullable(),
});

export type Outcome = 'success' | 'failed' | 'cancelled';

/** The body of `POST /v1/runner/tasks/{id}/complete`. */
export interface Completion {
  lease_id: string;
  outcome: Outcome;
  exit_code?: number | null;
  outputs?: Record<string, string>;
  transient?: boolean;
  error?: string | null;
}
