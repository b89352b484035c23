// Starting a compile after the caller's transaction committed: an async
// (`Event`) invocation of the compile function when CONDUCTOR_COMPILE_FUNCTION
// is set, else in this process after the caller has answered. Only the
// functions that dispatch (webhook, api, sweep) import this module, so the
// Lambda client and the compiler stay out of the others' bundles. Both are
// `import()`s (docs/architecture.md, "Bundles"): the Lambda client (the
// runtime's) loads at the first dispatch, the compiler only in the local
// stack, so neither weighs on a function's cold start.
import type { InvokeCommand, LambdaClient, LambdaClientConfig } from '@aws-sdk/client-lambda';
import type { AppContext } from '../context.ts';
import { openGate } from '../idle/gate.ts';
import { log } from '../log.ts';
import type { PipelineCompiler } from '../pipeline/index.ts';

/** Dispatches compiles through the Lambda client as async (`Event`) invocations. */
export function lambdaDispatcher(
  functionName: string,
  clientConfig: LambdaClientConfig = {},
): (jobId: string) => Promise<void> {
  let client: Promise<{ client: LambdaClient; InvokeCommand: typeof InvokeCommand }> | undefined;
  return async (jobId) => {
    client ??= import('@aws-sdk/client-lambda').then((sdk) => ({
      client: new sdk.LambdaClient(clientConfig),
      InvokeCommand: sdk.InvokeCommand,
    }));
    const { client: lambda, InvokeCommand } = await client;
    await lambda.send(
      new InvokeCommand({
        FunctionName: functionName,
        InvocationType: 'Event',
        Payload: Buffer.from(JSON.stringify({ job_id: jobId })),
      }),
    );
  };
}

/**
 * Compiles in this process, after the caller has answered (the local stack's way). The compiler
 * itself runs on a worker thread (lib/pipeline/worker.ts): the one event loop that answers every
 * local request never waits for a compile, however slow.
 */
export function inProcessDispatcher(
  ctx: () => AppContext,
  compile?: PipelineCompiler,
): (jobId: string) => Promise<void> {
  return async (jobId) => {
    setImmediate(() => {
      inProcessCompile(ctx(), jobId, compile).catch((err) =>
        log('error', 'compile failed; the sweep will dispatch it again', { job_id: jobId, err }),
      );
    });
  };
}

async function inProcessCompile(ctx: AppContext, jobId: string, compile?: PipelineCompiler) {
  const [{ runCompile }, { compileInWorker }] = await Promise.all([
    import('./compile.ts'),
    import('../pipeline/worker.ts'),
  ]);
  return runCompile(ctx, jobId, compile ?? compileInWorker);
}

const dispatchers = new WeakMap<AppContext, (jobId: string) => Promise<void>>();

function dispatcherOf(ctx: AppContext): (jobId: string) => Promise<void> {
  if (ctx.dispatchCompile) return ctx.dispatchCompile;
  let dispatcher = dispatchers.get(ctx);
  if (!dispatcher) {
    const name = ctx.config.CONDUCTOR_COMPILE_FUNCTION;
    dispatcher = name ? lambdaDispatcher(name) : inProcessDispatcher(() => ctx);
    dispatchers.set(ctx, dispatcher);
  }
  return dispatcher;
}

/**
 * Dispatches a compile after the caller's transaction committed. A failure is
 * logged, not raised: the job is recorded, and the sweep dispatches the
 * compile of a job left pending again.
 */
export async function dispatchCompile(ctx: AppContext, jobId: string): Promise<void> {
  // Every new, approved or rerun job passes here after its commit: the idle
  // gate opens before anything can wait on it (lib/idle/gate.ts).
  await openGate(ctx.gate);
  try {
    await dispatcherOf(ctx)(jobId);
  } catch (err) {
    log('error', 'could not dispatch a compile; the sweep will retry', { job_id: jobId, err });
  }
}
