// What the control plane answers on the runner routes, read leniently: the
// control plane owns these shapes and may add fields.
import * as z from '../lib/zod.ts';

const StringMapSchema = z.record(z.string(), z.string());

/** A container started beside a task's script (docker executor), reached by `name` on the task's network. */
export const ServiceSchema = z.object({
  name: z.string().check(z.minLength(1)),
  image: z.string().check(z.minLength(1)),
  env: z._default(StringMapSchema, {}),
  ports: z._default(z.array(z.number().check(z.int())), []),
  health: z._default(z.nullable(z.string()), null),
  health_timeout_s: z._default(z.number().check(z.positive()), 60),
  /** Replaces the image's CMD; null keeps it. */
  command: z._default(z.nullable(z.array(z.string())), null),
  /** Replaces the image's ENTRYPOINT (the first word the program); null keeps it, [] clears it. */
  entrypoint: z._default(z.nullable(z.array(z.string())), null),
});
export type Service = z.infer<typeof ServiceSchema>;

/** One attempt of a task, as `POST /v1/runner/claim` hands it out. */
export const TaskSchema = z.object({
  id: z.string().check(z.minLength(1)),
  job_id: z.string().check(z.minLength(1)),
  name: z.string(),
  lease_id: z.string().check(z.minLength(1)),
  attempt: z.number().check(z.int()),
  max_attempts: z.number().check(z.int()),
  lease_expires_at: z.string(),
  image: z._default(z.nullable(z.string()), null),
  script: z.array(z.string()),
  env: z._default(StringMapSchema, {}),
  secrets: z._default(StringMapSchema, {}),
  matrix: z._default(StringMapSchema, {}),
  needs_outputs: z._default(z.record(z.string(), StringMapSchema), {}),
  timeout_s: z.number().check(z.positive()),
  repo: z.object({
    url: z.string(),
    sha: z.string(),
    ref: z.string(),
    token: z.optional(z.string()),
  }),
  // Absent from a control plane that predates services: none.
  services: z._default(z.array(ServiceSchema), []),
  // Absent from a control plane that predates it: then the runner checks nothing.
  trusted: z.optional(z.boolean()),
  // Artifacts and caches (docs/artifacts.md); absent from a control plane that predates them: none.
  artifacts: z.optional(
    z.nullable(
      z.object({
        paths: z.array(z.string()),
        when: z._default(z.enum(['on_success', 'on_failure', 'always']), 'on_success'),
      }),
    ),
  ),
  caches: z.optional(
    z.array(
      z.object({
        key: z.string(),
        restore_keys: z._default(z.array(z.string()), []),
        paths: z.array(z.string()),
        policy: z._default(z.enum(['pull', 'push', 'pull-push']), 'pull-push'),
      }),
    ),
  ),
  // Test reports (docs/pipeline.md#reports-test-results); absent from a control plane that predates them: none.
  reports: z.optional(z.nullable(z.object({ junit: z.array(z.string()) }))),
});
export type Task = z.infer<typeof TaskSchema>;

export const ClaimAnswerSchema = z.object({ task: z.unknown() });

export const HeartbeatAnswerSchema = z.object({
  lease_expires_at: z.string(),
  cancel: z.boolean(),
});

export const LogAnswerSchema = z.object({ size: z.number().check(z.int(), z.gte(0)) });

export const CompleteAnswerSchema = z.object({
  state: z.string(),
  job_state: z.nullable(z.string()),
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
