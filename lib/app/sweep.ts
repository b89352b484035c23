import type { AppContext } from '../context.ts';
import { unavailability } from '../db/index.ts';
import { lookForWork, type WorkProbe } from '../idle/work.ts';
import { syncWorkers } from '../idle/workers.ts';
import { log } from '../log.ts';
import { purgeExpired, type SweepOptions, sweep } from '../scheduler/index.ts';
import { scheduleWork } from '../schedules/store.ts';
import { purgeStorage } from './artifacts.ts';
import { hintRunners } from './channel.ts';
import { dispatchCompile } from './dispatch.ts';
import { deliverNotifications, type NotifySummary, notifyOptions } from './notify.ts';
import { wakeClaims } from './pickup.ts';
import { type PoolsSummary, reconcilePools } from './pools.ts';
import { type FireSummary, fireDueSchedules } from './schedules.ts';
import { type DeliverySummary, deliverStatuses, statusOptions } from './statuses.ts';

/**
 * One sweep: the scheduler's repairs (each lost compile dispatched right
 * after its own commit), the commit statuses still due, and retention. With
 * `opts.deadline`, nothing new starts once it has passed: the summary counts
 * what was left in `deferred` (and `skipped`, naming the steps not run). A
 * failure that passes (a lock or statement timeout, a lost connection) is
 * counted in `deferred` and logged as a warning; a database that stopped
 * answering ends the sweep there. Answers the counts.
 */
export async function runSweep(ctx: AppContext, opts: SweepOptions = {}) {
  const halt = opts.halt ?? new AbortController();
  const { dispatch: _ids, ...repairs } = await sweep(ctx.pool, {
    dispatch: (jobId) => dispatchCompile(ctx, jobId),
    ...opts,
    halt,
  });
  // Requeued leases, promotions, and anything ended (which frees a
  // concurrency group's place) may let a waiting runner claim.
  const freed =
    repairs.leases_expired +
    repairs.tasks_requeued +
    repairs.tasks_promoted +
    repairs.tasks_failed +
    repairs.tasks_timed_out +
    repairs.tasks_queue_timed_out +
    repairs.tasks_block_timed_out +
    repairs.tasks_cancelled +
    repairs.jobs_settled;
  if (freed > 0) {
    wakeClaims(ctx, 'sweep');
    await hintRunners(ctx);
  }
  const outOfTime = () =>
    halt.signal.aborted || (opts.deadline !== undefined && Date.now() >= opts.deadline);
  const skipped = [...repairs.skipped];
  let deferred = repairs.deferred;
  // Statuses and retention are whole steps: one that meets a failure that
  // passes is left for the next sweep as a repair is.
  const step = async <T>(name: string, none: T, run: () => Promise<T>): Promise<T> => {
    if (outOfTime()) {
      skipped.push(name);
      return none;
    }
    try {
      return await run();
    } catch (err) {
      const kind = unavailability(err);
      if (!kind) throw err;
      if (kind === 'silent') halt.abort(err);
      deferred++;
      skipped.push(name);
      log('warn', `sweep: ${name} deferred to the next sweep`, { err });
      return none;
    }
  };
  // Runner pools (#51, lib/app/pools.ts): a step of its own, after the
  // repairs so that tasks they requeued count as demand.
  const pools: PoolsSummary = await step('pools', { launches_started: 0, launches_ended: 0 }, () =>
    reconcilePools(ctx),
  );
  const statuses: DeliverySummary = await step(
    'statuses',
    { statuses_delivered: 0, statuses_superseded: 0, statuses_failed: 0, statuses_given_up: 0 },
    () => deliverStatuses(ctx.pool, ctx.keyring, statusOptions(ctx)),
  );
  // Notifications of finished jobs (lib/app/notify.ts), after the commit
  // that wrote them, never in a completion.
  const notified: NotifySummary = await step(
    'notifications',
    {
      notifications_delivered: 0,
      notifications_failed: 0,
      notifications_skipped: 0,
      notifications_given_up: 0,
    },
    () => deliverNotifications(ctx.pool, ctx.keyring, notifyOptions(ctx)),
  );
  // Schedules due by now (lib/app/schedules.ts): one job per tick, whoever fires it.
  const fired: FireSummary = await step(
    'schedules',
    { schedules_fired: 0, schedules_skipped: 0 },
    () => fireDueSchedules(ctx, new Date(), { deadline: opts.deadline }),
  );
  const purged = await step('retention', { log_chunks_purged: 0, jobs_purged: 0 }, () =>
    purgeExpired(ctx.pool, {
      logDays: ctx.config.CONDUCTOR_RETENTION_LOG_DAYS,
      jobDays: ctx.config.CONDUCTOR_RETENTION_JOB_DAYS,
    }),
  );
  // Expired artifacts and abandoned uploads (docs/artifacts.md).
  const stored = await step(
    'artifacts',
    { artifacts_purged: 0, caches_purged: 0, reports_purged: 0 },
    () => purgeStorage(ctx),
  );
  const summary = {
    ...repairs,
    deferred,
    ...pools,
    ...statuses,
    ...notified,
    ...fired,
    ...purged,
    ...stored,
    skipped,
  };
  const {
    statuses_delivered: _d,
    notifications_delivered: _n,
    notifications_skipped: _k,
    skipped: _s,
    ...worth
  } = summary;
  if (skipped.length > 0 || deferred > 0) {
    log('warn', 'sweep left work for the next sweep', summary);
  } else if (Object.values(worth).some((n) => n > 0)) {
    log('info', 'sweep repaired', summary);
  }
  return summary;
}

/** The weekly backstop schedule's event (named daily when it was): a sweep that does not ask the idle gate first. */
export const DAILY_EVENT = { conductor: 'daily' } as const;

/**
 * Work beyond the scheduler's that keeps the idle gate open or wakes it
 * (lib/idle/work.ts, WorkProbe): time-based work (schedules) adds its probe
 * here, answering `work` when something is due and `wakeAt` with the next.
 */
export const WORK_PROBES: WorkProbe[] = [scheduleWork];

/**
 * The scheduled sweep: runSweep, answering its counts and what became of the
 * idle gate. With the gate closed, the minute's sweep answers
 * `{"gate": "closed"}` without a connection, unless a close was left pending
 * or the wake time the close left has come; the weekly one sweeps regardless
 * (retention, and a backstop for a gate left closed over work). After the
 * sweep, the gate closes when the database holds no work that can proceed.
 */
export async function scheduledSweep(ctx: AppContext, opts: { deadline?: number; daily: boolean }) {
  const gate = ctx.gate;
  const call = gate && !opts.daily ? await gate.sweepCall() : 'open';
  if (call === 'closed') return { gate: 'closed' as const };
  const summary = await runSweep(ctx, { deadline: opts.deadline });
  if (!gate) return summary;
  // Workers registered before the bucket kept token hashes, copied once.
  await syncWorkers(ctx.pool, gate).catch((err) =>
    log('warn', 'could not copy the workers into the idle gate', { err }),
  );
  // A sweep out of time leaves the gate as it is: open costs the next sweep
  // a connection; a close left pending is finished by the next sweep.
  if (opts.deadline !== undefined && Date.now() > opts.deadline) {
    return { ...summary, gate: 'open' as const };
  }
  const state = await gate.closeIfIdle(() => lookForWork(ctx.pool, WORK_PROBES), {
    markerSeen: call === 'open' && !opts.daily,
  });
  return { ...summary, gate: state };
}
