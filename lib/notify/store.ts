// The rows of notifications (migrations/024): a project's destinations, and
// the outbox the trigger conductor_job_finished_notify fills when a job
// finishes. Claimed and finished here by the deliverer (lib/app/notify.ts).
import type { Pool, Queryable } from '../db/index.ts';
import { transaction } from '../db/index.ts';
import type { NotificationEvent, NotificationKind, NotificationResult } from '../states.ts';

/** A notification as stored (the URL and the signing secret sealed). */
export interface NotificationRow {
  id: string;
  project_id: string;
  kind: NotificationKind;
  url_enc: string | null;
  url_host: string | null;
  email_to: string[] | null;
  secret_enc: string | null;
  on_events: NotificationEvent[];
  branches: string[] | null;
  created_at: Date;
}

/** Most notifications one project may have. */
export const MAX_NOTIFICATIONS = 50;

/** Writes a notification; answers its row. */
export async function insertNotification(
  db: Queryable,
  row: Omit<NotificationRow, 'created_at'>,
): Promise<NotificationRow> {
  const { rows } = await db.query<NotificationRow>(
    `insert into notifications (project_id, kind, url_enc, url_host, email_to, secret_enc, on_events, branches, id)
     values ($1, $2, $3, $4, $5, $6, $7, $8, $9)
     returning *`,
    [
      row.project_id,
      row.kind,
      row.url_enc,
      row.url_host,
      row.email_to,
      row.secret_enc,
      row.on_events,
      row.branches,
      row.id,
    ],
  );
  return rows[0]!;
}

/** How many notifications a project has. */
export async function countNotifications(db: Queryable, projectId: string): Promise<number> {
  const { rows } = await db.query<{ n: number }>(
    'select count(*)::int as n from notifications where project_id = $1',
    [projectId],
  );
  return rows[0]!.n;
}

/** A project's notifications, oldest first. */
export async function listNotificationRows(
  db: Queryable,
  projectId: string,
): Promise<NotificationRow[]> {
  const { rows } = await db.query<NotificationRow>(
    'select * from notifications where project_id = $1 order by created_at, id',
    [projectId],
  );
  return rows;
}

/** Deletes one of a project's notifications (its undelivered rows with it); false when there is none. */
export async function deleteNotificationRow(
  db: Queryable,
  projectId: string,
  id: string,
): Promise<NotificationRow | null> {
  const { rows } = await db.query<NotificationRow>(
    'delete from notifications where project_id = $1 and id = $2 returning *',
    [projectId, id],
  );
  return rows[0] ?? null;
}

/** An outbox row claimed for sending, with its notification and its job. */
export interface ClaimedNotification {
  id: number;
  delivery_id: string;
  attempts: number;
  created_at: Date;
  reason: string;
  job_state: string;
  notification: NotificationRow;
  job: {
    id: string;
    project_id: string;
    number: number;
    ref: string;
    base_ref: string | null;
    sha: string;
  };
}

// How long a sender may hold a row while the receiver answers: longer than a
// send's timeout, so a row is never sent twice at once.
const CLAIM_S = 120;

/**
 * Claims up to `limit` due rows (or only `jobId`'s), skipping rows another
 * sender holds; each claim counts an attempt.
 */
export async function claimDueNotifications(
  pool: Pool,
  limit: number,
  jobId?: string,
): Promise<ClaimedNotification[]> {
  return transaction(
    pool,
    async (tx) => {
      // skip locked: two sweeps (or a sweep and a post-commit send) take
      // different rows rather than waiting for each other.
      const { rows } = await tx.query<ClaimedNotification>(
        `with due as (
           select o.id from notification_outbox o
            where o.result is null and o.next_attempt_at <= now()
              and (o.claimed_until is null or o.claimed_until <= now())
              and ($2::uuid is null or o.job_id = $2)
            order by o.next_attempt_at
            limit $1
            for update skip locked)
         update notification_outbox o
            set claimed_until = now() + make_interval(secs => $3), attempts = o.attempts + 1
           from due, notifications n, jobs j
          where o.id = due.id and n.id = o.notification_id and j.id = o.job_id
          returning o.id, o.delivery_id, o.attempts, o.created_at, o.reason, o.job_state,
                    to_jsonb(n) as notification,
                    jsonb_build_object('id', j.id, 'project_id', j.project_id, 'number', j.number,
                                       'ref', j.ref, 'base_ref', j.base_ref, 'sha', j.sha) as job`,
        [limit, jobId ?? null, CLAIM_S],
      );
      return rows;
    },
    { isolation: 'read committed' },
  );
}

/** The names of a job's tasks that failed (not allowed to), in graph order. */
export async function failedTaskNames(db: Queryable, jobId: string): Promise<string[]> {
  const { rows } = await db.query<{ name: string }>(
    `select name from tasks
      where job_id = $1 and state = 'failed' and not allow_failure
      order by name
      limit 200`,
    [jobId],
  );
  return rows.map((r) => r.name);
}

/** Ends a claimed row: delivered, skipped or given up; or back to wait `retryInS`. */
export async function finishNotification(
  db: Queryable,
  id: number,
  outcome: { result: NotificationResult; error?: string } | { retryInS: number; error: string },
): Promise<void> {
  if ('result' in outcome) {
    await db.query(
      `update notification_outbox
          set result = $2, done_at = now(), claimed_until = null, last_error = $3
        where id = $1`,
      [id, outcome.result, outcome.error?.slice(0, 2000) ?? null],
    );
  } else {
    await db.query(
      `update notification_outbox
          set claimed_until = null, last_error = $2,
              next_attempt_at = now() + make_interval(secs => $3)
        where id = $1`,
      [id, outcome.error.slice(0, 2000), outcome.retryInS],
    );
  }
}
