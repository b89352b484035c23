// An ecs pool's settings, apart from the provider (ecs.ts) so that checking
// them loads neither the provider nor the AWS SDK (lib/app/fleet-aws.ts).
import { z } from 'zod';

/** An ecs pool's settings (docs/runner.md, "The ecs provider"). */
export const EcsSettingsSchema = z.strictObject({
  cluster: z.string().min(1).max(2048),
  task_definition: z.string().min(1).max(2048),
  /** The runner's container in the task definition. */
  container: z.string().min(1).max(255).default('runner'),
  subnets: z.array(z.string().min(1).max(255)).min(1, 'at least one subnet').max(16),
  security_groups: z.array(z.string().min(1).max(255)).max(5).default([]),
  /** A public IP only when asked for (subnets with a NAT need none). */
  assign_public_ip: z.boolean().default(false),
  /** The bucket of the token's environment file (the execution role reads it). */
  token_bucket: z.string().min(3).max(63),
  region: z.string().min(1).max(50).optional(),
  idle_limit_s: z.number().int().min(1).max(3600).optional(),
  url: z.string().url().optional(),
  executor: z.enum(['shell', 'docker']).optional(),
});
export type EcsSettings = z.infer<typeof EcsSettingsSchema>;
