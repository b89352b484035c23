import type { AppContext } from '../context.ts';
import { log } from '../log.ts';
import { purgeExpired, type SweepOptions, sweep } from '../scheduler/index.ts';
import { dispatchCompile } from './dispatch.ts';
import { type DeliverySummary, deliverStatuses, statusOptions } from './statuses.ts';

/**
 * One sweep: the scheduler's repairs (each lost compile dispatched right
 * after its own commit), the commit statuses still due, and retention. With
 * `opts.deadline`, nothing new starts once it has passed: the summary counts
 * what was left in `deferred` (and `skipped`, naming the steps not run).
 * Answers the counts.
 */
export async function runSweep(ctx: AppContext, opts: SweepOptions = {}) {
  const { dispatch: _ids, ...repairs } = await sweep(ctx.pool, {
    dispatch: (jobId) => dispatchCompile(ctx, jobId),
    ...opts,
  });
  const outOfTime = () => opts.deadline !== undefined && Date.now() >= opts.deadline;
  const skipped = [...repairs.skipped];
  let statuses: DeliverySummary = {
    statuses_delivered: 0,
    statuses_superseded: 0,
    statuses_failed: 0,
    statuses_given_up: 0,
  };
  if (outOfTime()) skipped.push('statuses');
  else statuses = await deliverStatuses(ctx.pool, ctx.keyring, statusOptions(ctx));
  let purged = { log_chunks_purged: 0, jobs_purged: 0 };
  if (outOfTime()) skipped.push('retention');
  else {
    purged = await purgeExpired(ctx.pool, {
      logDays: ctx.config.CONDUCTOR_RETENTION_LOG_DAYS,
      jobDays: ctx.config.CONDUCTOR_RETENTION_JOB_DAYS,
    });
  }
  const summary = { ...repairs, ...statuses, ...purged, skipped };
  const { statuses_delivered: _d, skipped: _s, ...worth } = summary;
  if (skipped.length > 0 || repairs.deferred > 0) {
    log('warn', 'sweep ran out of time; the next sweep does the rest', summary);
  } else if (Object.values(worth).some((n) => n > 0)) {
    log('info', 'sweep repaired', summary);
  }
  return summary;
}
