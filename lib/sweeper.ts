import type { AppContext } from './context.ts';
import { dispatchCompile } from './dispatch.ts';
import { log } from './log.ts';
import { type SweepOptions, type SweepSummary, sweep } from './scheduler/index.ts';

/** One sweep, then a dispatch of every compile it found lost; answers the counts. */
export async function runSweep(
  ctx: AppContext,
  opts: SweepOptions = {},
): Promise<Omit<SweepSummary, 'dispatch'>> {
  const { dispatch, ...summary } = await sweep(ctx.pool, opts);
  for (const jobId of dispatch) await dispatchCompile(ctx, jobId);
  const repaired = Object.values(summary).some((n) => n > 0);
  if (repaired) log('info', 'sweep repaired', summary);
  return summary;
}
