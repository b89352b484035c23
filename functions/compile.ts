import { injectLambdaContext } from '@aws-lambda-powertools/logger/middleware';
import middy from '@middy/core';
import { runCompile } from '../lib/app/compile.ts';
import { getContext } from '../lib/context.ts';
import { ValidationError } from '../lib/errors.ts';
import { zodIssues } from '../lib/http/index.ts';
import { logger } from '../lib/log.ts';
import * as z from '../lib/zod.ts';

export const CompileEventSchema = z.object({
  job_id: z.string().check(z.regex(/^[0-9a-f-]{36}$/i, 'must be a job id')),
});

/** An async invocation `{ "job_id" }` from the webhook, the api or the sweep; safe to run twice. */
async function main(event: unknown) {
  const parsed = CompileEventSchema.safeParse(event);
  if (!parsed.success) throw new ValidationError(zodIssues(parsed.error));
  const outcome = await runCompile(await getContext(), parsed.data.job_id.toLowerCase());
  return { job_id: parsed.data.job_id, outcome };
}

// No early timeout: the sweep keeps its own deadline, and a compile that runs
// out of time is left pending for the sweep to dispatch again.
export const handler = middy({ timeoutEarlyInMillis: 0 })
  .use(injectLambdaContext(logger))
  .handler(main);
