import type { AppContext } from './context.ts';
import { dispatchCompile } from './dispatch.ts';
import { log } from './log.ts';
import { purgeExpired, type SweepOptions, sweep } from './scheduler/index.ts';
import { deliverStatuses, statusOptions } from './statuses.ts';

/**
 * One sweep: the scheduler's repairs, a dispatch of every compile it found
 * lost, the commit statuses still due, and retention. Answers the counts.
 */
export async function runSweep(ctx: AppContext, opts: SweepOptions = {}) {
  const { dispatch, ...repairs } = await sweep(ctx.pool, opts);
  for (const jobId of dispatch) await dispatchCompile(ctx, jobId);
  const statuses = await deliverStatuses(ctx.pool, ctx.keyring, statusOptions(ctx));
  const purged = await purgeExpired(ctx.pool, {
    logDays: ctx.config.CONDUCTOR_RETENTION_LOG_DAYS,
    jobDays: ctx.config.CONDUCTOR_RETENTION_JOB_DAYS,
  });
  const summary = { ...repairs, ...statuses, ...purged };
  const { statuses_delivered: _d, ...worth } = summary;
  if (Object.values(worth).some((n) => n > 0)) log('info', 'sweep repaired', summary);
  return summary;
}
