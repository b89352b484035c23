import { completeForToken } from '../lib/app/complete.ts';
import { requireWorker } from '../lib/app/workers.ts';
import { getContext } from '../lib/context.ts';
import { workerTokenHash } from '../lib/http/auth.ts';
import { type HttpEvent, httpFunction, idParam, jsonBody, type Reply } from '../lib/http/index.ts';
import { LeaseIdSchema } from '../lib/http/schemas.ts';
import * as z from '../lib/zod.ts';

export const CompleteSchema = z.strictObject({
  lease_id: LeaseIdSchema,
  outcome: z.enum(['success', 'failed', 'cancelled']),
  exit_code: z.optional(
    z.nullable(z.number().check(z.int(), z.gte(-2_147_483_648), z.lte(2_147_483_647))),
  ),
  outputs: z.optional(
    z.record(
      z
        .string()
        .check(z.regex(/^[A-Za-z_][A-Za-z0-9_]*$/, 'output names are letters, digits and _')),
      z.string().check(z.maxLength(1024 * 1024)),
    ),
  ),
  transient: z.optional(z.boolean()),
  error: z.optional(z.nullable(z.string().check(z.maxLength(10_000)))),
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
  const answer = await completeForToken(ctx, tokenHash, {
    taskId,
    leaseId: body.lease_id,
    outcome: body.outcome,
    exitCode: body.exit_code ?? null,
    outputs: body.outputs ?? {},
    transient: body.transient ?? false,
    error: body.error ?? null,
  });
  return { status: 200, body: answer };
}

export const handler = httpFunction(main, { maxBodyBytes: 8 * 1024 * 1024 });
