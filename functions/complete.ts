import { z } from 'zod';
import { requireWorker, workerTokenHash, workerTokenRequired } from '../lib/auth.ts';
import { getContext } from '../lib/context.ts';
import { type HttpEvent, httpFunction, idParam, jsonBody, type Reply } from '../lib/http/index.ts';
import { LeaseIdSchema } from '../lib/http/schemas.ts';
import { maskReport } from '../lib/logs.ts';
import { completeSuccessByToken, completeTask } from '../lib/scheduler/index.ts';
import { deliverJobStatus } from '../lib/statuses.ts';

export const CompleteSchema = z.strictObject({
  lease_id: LeaseIdSchema,
  outcome: z.enum(['success', 'failed', 'cancelled']),
  exit_code: z.number().int().min(-2_147_483_648).max(2_147_483_647).nullable().optional(),
  outputs: z
    .record(
      z.string().regex(/^[A-Za-z_][A-Za-z0-9_]*$/, 'output names are letters, digits and _'),
      z.string().max(1024 * 1024),
    )
    .optional(),
  transient: z.boolean().optional(),
  error: z.string().max(10_000).nullable().optional(),
});

/** POST /v1/runner/tasks/{id}/complete */
async function main(event: HttpEvent): Promise<Reply> {
  const ctx = await getContext();
  const tokenHash = workerTokenHash(event);
  let taskId: string;
  let body: z.infer<typeof CompleteSchema>;
  try {
    taskId = idParam(event, 'id', 'task');
    body = jsonBody(event, CompleteSchema);
  } catch (err) {
    // A bad token is a 401 even when the request is bad too.
    await requireWorker(ctx.pool, event);
    throw err;
  }
  // Outputs and the error are shown in the job view and outputs are handed to
  // the tasks that need them: undeclared or oversized outputs are refused and
  // secret values masked, before either way of recording the outcome. A
  // completion with neither (most of them) skips this read, and a success
  // stays one round trip.
  const report = await maskReport(
    ctx.pool,
    ctx.keyring,
    taskId,
    { outputs: body.outputs ?? {}, error: body.error ?? null },
    () => requireWorker(ctx.pool, event),
  );
  const successFirst = body.outcome === 'success' && !body.error;
  let workerId: string;
  if (successFirst) {
    // The common case: the token check and the success are one statement.
    const fast = await completeSuccessByToken(ctx.pool, tokenHash, {
      taskId,
      leaseId: body.lease_id,
      exitCode: body.exit_code ?? null,
      outputs: report.outputs,
      transient: body.transient ?? false,
    });
    if (!fast.workerId) throw workerTokenRequired();
    if (fast.result) {
      if (fast.result.job_state) await deliverJobStatus(ctx, fast.result.job_id);
      return {
        status: 200,
        body: { state: fast.result.state, job_state: fast.result.job_state },
      };
    }
    workerId = fast.workerId;
  } else {
    workerId = (await requireWorker(ctx.pool, event)).id;
  }
  const result = await completeTask(
    ctx.pool,
    {
      workerId,
      taskId,
      leaseId: body.lease_id,
      outcome: body.outcome,
      exitCode: body.exit_code ?? null,
      outputs: report.outputs,
      transient: body.transient ?? false,
      error: report.error || null,
    },
    { successTried: successFirst },
  );
  if (result.job_state) await deliverJobStatus(ctx, result.job_id);
  return { status: 200, body: { state: result.state, job_state: result.job_state } };
}

export const handler = httpFunction(main, { maxBodyBytes: 8 * 1024 * 1024 });
