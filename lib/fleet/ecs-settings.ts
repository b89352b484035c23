// An ecs pool's settings, apart from the provider (ecs.ts) so that checking
// them loads neither the provider nor the AWS SDK (lib/app/fleet-aws.ts).
import * as z from '../zod.ts';

/** An ecs pool's settings (docs/runner.md, "The ecs provider"). */
export const EcsSettingsSchema = z.strictObject({
  cluster: z.string().check(z.minLength(1), z.maxLength(2048)),
  task_definition: z.string().check(z.minLength(1), z.maxLength(2048)),
  /** The runner's container in the task definition. */
  container: z._default(z.string().check(z.minLength(1), z.maxLength(255)), 'runner'),
  subnets: z
    .array(z.string().check(z.minLength(1), z.maxLength(255)))
    .check(z.minLength(1, 'at least one subnet'), z.maxLength(16)),
  security_groups: z._default(
    z.array(z.string().check(z.minLength(1), z.maxLength(255))).check(z.maxLength(5)),
    [],
  ),
  /** A public IP only when asked for (subnets with a NAT need none). */
  assign_public_ip: z._default(z.boolean(), false),
  /** The bucket of the token's environment file (the execution role reads it). */
  token_bucket: z.string().check(z.minLength(3), z.maxLength(63)),
  region: z.optional(z.string().check(z.minLength(1), z.maxLength(50))),
  idle_limit_s: z.optional(z.number().check(z.int(), z.gte(1), z.lte(3600))),
  url: z.optional(z.string().check(z.url())),
  executor: z.optional(z.enum(['shell', 'docker'])),
});
export type EcsSettings = z.infer<typeof EcsSettingsSchema>;
