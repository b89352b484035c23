// The `ecs` provider for the functions that carry the AWS SDK anyway (api,
// sweep): the compile and completion functions leave the launches they
// decide to the sweep, and their bundles stay within budget
// (docs/architecture.md, "Bundles").
import type { AppContext } from '../context.ts';
import { EcsProvider } from '../fleet/ecs.ts';

/** Adds the `ecs` provider to the context (once), configured from its settings. */
export function withEcsProvider(ctx: AppContext): AppContext {
  if (ctx.fleet?.ecs) return ctx;
  ctx.fleet = { ...ctx.fleet, ecs: ecsProvider(ctx) };
  return ctx;
}

/** An `ecs` provider from the context's configuration (CONDUCTOR_ECS_ENDPOINT and the token's S3). */
export function ecsProvider(ctx: Pick<AppContext, 'config'>): EcsProvider {
  return new EcsProvider({
    ...(ctx.config.CONDUCTOR_ECS_ENDPOINT ? { endpoint: ctx.config.CONDUCTOR_ECS_ENDPOINT } : {}),
    ...(ctx.config.CONDUCTOR_RUNNER_TOKEN_S3_ENDPOINT
      ? { s3Endpoint: ctx.config.CONDUCTOR_RUNNER_TOKEN_S3_ENDPOINT }
      : {}),
    tokenPrefix: ctx.config.CONDUCTOR_RUNNER_TOKEN_PREFIX,
  });
}
