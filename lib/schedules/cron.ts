// When a schedule fires: its cron expression (croner) read in its IANA time
// zone, the tick it is due for, and its jitter. Pure: the caller passes the
// time, so tests drive the clock.
import { createHash } from 'node:crypto';
import { Cron } from 'croner';

/** The shortcuts a schedule may use in place of five fields. */
export const CRON_SHORTCUTS = ['@hourly', '@daily', '@weekly', '@monthly'] as const;

/** The most seconds a schedule's jitter adds to its ticks. */
export const MAX_JITTER_S = 30;

/** How late a tick may be fired under `catch_up: none`; an older one is skipped. */
export const CATCH_UP_NONE_GRACE_MS = 5 * 60_000;

/** Why a cron expression is not one a schedule takes; null when it is. */
export function cronProblem(cron: string): string | null {
  const text = cron.trim();
  if (text.startsWith('@')) {
    return (CRON_SHORTCUTS as readonly string[]).includes(text)
      ? null
      : `${JSON.stringify(text)} is not one of ${CRON_SHORTCUTS.join(', ')}`;
  }
  const fields = text.split(/\s+/);
  if (fields.length !== 5) {
    return `must have 5 fields (minute hour day-of-month month day-of-week), got ${fields.length}`;
  }
  try {
    const job = new Cron(text, { paused: true });
    // An expression that can never fire (30 February) has no next run.
    if (job.nextRun(new Date(0)) === null) return 'never matches a date';
  } catch (err) {
    return err instanceof Error ? err.message.replace(/^CronPattern: /, '') : String(err);
  }
  return null;
}

/** Why a time zone is not an IANA one this runtime knows; null when it is. */
export function timezoneProblem(timezone: string): string | null {
  try {
    new Intl.DateTimeFormat('en-US', { timeZone: timezone });
    return null;
  } catch {
    return `${JSON.stringify(timezone)} is not an IANA time zone (such as UTC or Europe/Berlin)`;
  }
}

function cronOf(cron: string, timezone: string): Cron {
  return new Cron(cron.trim(), { paused: true, timezone });
}

/**
 * The first tick strictly after `after`. A local time that a spring-forward
 * skips fires at the next valid time; a local time that a fall-back repeats
 * fires once (croner's rules, tested in test/schedules/cron.test.ts).
 */
export function nextTick(cron: string, timezone: string, after: Date): Date | null {
  return cronOf(cron, timezone).nextRun(after);
}

/**
 * The latest tick at or before `now`, later than `since` (exclusive); null
 * when none falls in between. Found backward from `now` (croner's
 * previousRuns), so a gap of any length costs the same: an @monthly schedule
 * back after months, or an every-minute one after a week, answers in well
 * under a millisecond. The answer is then taken from the forward sequence
 * (nextRun) that nextTick uses, so a DST edge gives the same instant either way.
 */
export function latestTick(cron: string, timezone: string, since: Date, now: Date): Date | null {
  const job = cronOf(cron, timezone);
  // previousRuns answers runs strictly before its reference; 1 ms later
  // includes a tick exactly at `now`.
  const back = job.previousRuns(1, new Date(now.getTime() + 1))[0];
  if (back === undefined) return null;
  // Walk forward from just before it (and, should DST make the two disagree,
  // from a day and a bit earlier): a few steps at most.
  let latest: Date | null = null;
  for (const lead of [1, 26 * 3_600_000]) {
    let at = new Date(Math.max(back.getTime() - lead, since.getTime()));
    for (let i = 0; i < 2_000; i++) {
      const next = job.nextRun(at);
      if (next === null || next > now) break;
      latest = next;
      at = next;
    }
    if (latest !== null) break;
  }
  return latest !== null && latest > since ? latest : null;
}

/**
 * A schedule's jitter in whole seconds, 0 to MAX_JITTER_S - 1: the same for
 * the same schedule every time (a hash of project and name), spread across
 * schedules, so that hundreds of `0 * * * *` do not all fire in one second.
 */
export function jitterSeconds(projectId: string, name: string): number {
  const digest = createHash('sha256').update(`${projectId}\0${name}`).digest();
  return digest.readUInt32BE(0) % MAX_JITTER_S;
}

/** The tick and when it is due (the tick plus the jitter). */
export interface Due {
  tick: Date;
  dueAt: Date;
}

/** The next tick after `after` and when it is due, or null for an expression that never fires again. */
export function nextDue(
  schedule: { cron: string; timezone: string; projectId: string; name: string },
  after: Date,
): Due | null {
  const tick = nextTick(schedule.cron, schedule.timezone, after);
  if (tick === null) return null;
  const jitter = jitterSeconds(schedule.projectId, schedule.name);
  return { tick, dueAt: new Date(tick.getTime() + jitter * 1000) };
}
