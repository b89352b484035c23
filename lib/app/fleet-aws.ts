// The `ecs` provider for the functions that launch runners (api, sweep): the
// compile and completion functions leave the launches they decide to the
// sweep. The provider and the AWS SDK under it are an `import()` at the first
// launch, stop or reconcile, so no cold start loads them; its settings
// (ecs-settings.ts) check a pool without them (docs/architecture.md, "Bundles").
import type { AppContext } from '../context.ts';
import type { EcsProvider } from '../fleet/ecs.ts';
import { EcsSettingsSchema } from '../fleet/ecs-settings.ts';
import type { RunnerProvider } from '../fleet/provider.ts';

/** Adds the `ecs` provider to the context (once), configured from its settings. */
export function withEcsProvider(ctx: AppContext): AppContext {
  if (ctx.fleet?.ecs) return ctx;
  ctx.fleet = { ...ctx.fleet, ecs: ecsProvider(ctx) };
  return ctx;
}

/** An `ecs` provider from the context's configuration (CONDUCTOR_ECS_ENDPOINT and the token's S3). */
export function ecsProvider(ctx: Pick<AppContext, 'config'>): RunnerProvider {
  let provider: Promise<EcsProvider> | undefined;
  const ecs = () => {
    provider ??= import('../fleet/ecs.ts').then(
      (m) =>
        new m.EcsProvider({
          ...(ctx.config.CONDUCTOR_ECS_ENDPOINT
            ? { endpoint: ctx.config.CONDUCTOR_ECS_ENDPOINT }
            : {}),
          ...(ctx.config.CONDUCTOR_RUNNER_TOKEN_S3_ENDPOINT
            ? { s3Endpoint: ctx.config.CONDUCTOR_RUNNER_TOKEN_S3_ENDPOINT }
            : {}),
          tokenPrefix: ctx.config.CONDUCTOR_RUNNER_TOKEN_PREFIX,
        }),
    );
    return provider;
  };
  return {
    settings: EcsSettingsSchema,
    launch: async (...a) => (await ecs()).launch(...a),
    running: async (...a) => (await ecs()).running(...a),
    stop: async (...a) => (await ecs()).stop(...a),
  };
}
