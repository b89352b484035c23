// What keeps the idle gate open: work that can proceed now. Work that
// cannot proceed yet (a status whose next retry is in the future, a task no
// live worker may claim, which only its queue timeout will end) does not; its
// due time becomes the gate's wake time, and the minute's sweep opens the
// gate then (lib/idle/gate.ts).
import { type Pool, type Queryable, transaction } from '../db/index.ts';
import type { Look } from './gate.ts';

/**
 * One kind of work the gate must know of. Other capabilities add theirs
 * (lib/app/sweep.ts lists them): a schedule answers `work` when one is due
 * and `wakeAt` with the next firing, so a closed gate opens for it.
 */
export type WorkProbe = (db: Queryable) => Promise<Look>;

// A queued task is claimable when a live worker's labels, trust and project
// scope admit it, as conductor_claim decides (migrations/007).
const CLAIMABLE_BY_A_LIVE_WORKER = `
  exists (select 1 from workers w
           where not w.revoked
             and not (w.ephemeral and w.claimed_lease is not null)
             and t.labels <@ w.labels
             and t.trusted = not w.untrusted
             and (w.projects is null or j.project_id = any (w.projects)))`;

/**
 * The scheduler's work: a job compiling; a task running (its lease to
 * watch); a queued task some live worker may claim; a running job with
 * nothing queued or running (the sweep settles it or promotes its waiting
 * tasks); a status or a notification due for delivery. Waits: the next
 * status or notification retry and the
 * queue timeout of a task nobody may claim.
 */
export const schedulerWork: WorkProbe = async (db) => {
  const { rows } = await db.query<{ work: boolean; wake_at: Date | null }>(
    `select exists (select 1 from jobs where state = 'pending')
         or exists (select 1 from jobs j where j.state = 'running'
                      and not exists (select 1 from tasks t
                                       where t.job_id = j.id and t.state in ('queued', 'running')))
         or exists (select 1 from tasks t join jobs j on j.id = t.job_id
                     where j.state = 'running' and t.state = 'running')
         or exists (select 1 from tasks t join jobs j on j.id = t.job_id
                     where j.state = 'running' and t.state = 'queued'
                       and ${CLAIMABLE_BY_A_LIVE_WORKER})
         or exists (select 1 from status_outbox
                     where result is null and next_attempt_at <= now())
         or exists (select 1 from notification_outbox
                     where result is null and next_attempt_at <= now()) as work,
            least(
              (select min(next_attempt_at) from status_outbox where result is null),
              (select min(next_attempt_at) from notification_outbox where result is null),
              (select min(t.queued_at + make_interval(secs => t.queue_timeout_s))
                 from tasks t join jobs j on j.id = t.job_id
                where j.state = 'running' and t.state = 'queued')) as wake_at`,
  );
  return { work: rows[0]!.work, wakeAt: rows[0]!.wake_at };
};

/** Bounds each look, so that a close never waits on a stuck statement. */
const LOOK_TIMEOUT_MS = 2_000;

/**
 * Looks for work with every probe in one read-only snapshot: work if any
 * finds some, and the earliest wake time of those that do not.
 */
export async function lookForWork(pool: Pool, probes: readonly WorkProbe[] = []): Promise<Look> {
  return transaction(
    pool,
    async (tx) => {
      let wakeAt: Date | null = null;
      for (const probe of [schedulerWork, ...probes]) {
        const look = await probe(tx);
        if (look.work) return { work: true };
        if (look.wakeAt && (!wakeAt || look.wakeAt < wakeAt)) wakeAt = look.wakeAt;
      }
      return { work: false, wakeAt };
    },
    { readOnly: true, statementTimeoutMs: LOOK_TIMEOUT_MS, maxRetries: 1 },
  );
}

/** Whether the database holds work that can proceed now (lookForWork's answer). */
export async function hasOpenWork(pool: Pool): Promise<boolean> {
  return (await lookForWork(pool)).work;
}
