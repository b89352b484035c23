// Sending notifications (lib/notify/) from their outbox, outside any
// transaction: the trigger conductor_job_finished_notify wrote a row in the
// transaction that finished the job, and the sweep sends what is due, so a
// completion never waits for a receiver. A failure is retried with
// exponential backoff until CONDUCTOR_NOTIFY_GIVE_UP_H has passed; every
// attempt carries the row's one X-Conductor-Delivery id, so a receiver that
// got a message whose answer was lost (a timeout) can tell the retry is the
// same message.
import type { AppContext } from '../context.ts';
import type { Pool } from '../db/index.ts';
import { log } from '../log.ts';
import { branchSelected } from '../notify/branches.ts';
import type { FinishedJob, TestTotals } from '../notify/message.ts';
import { type Destination, NotifyRefusedError, sendNotification } from '../notify/send.ts';
import {
  type ClaimedNotification,
  claimDueNotifications,
  failedTaskNames,
  finishNotification,
} from '../notify/store.ts';
import { signJobLink } from '../pages/access.ts';
import { decrypt, type Keyring } from '../secrets.ts';
import { notificationSeal } from './notifications.ts';

export type { TestTotals };

export interface NotifyOptions {
  /** The job page's links start here (CONDUCTOR_PUBLIC_URL); without it they are paths. */
  publicUrl?: string;
  smtp?: { url: string; from: string };
  /** After this long since a row was written, it is given up. Default 6 h. */
  giveUpAfterS?: number;
  /** Most rows sent in one call. Default 50. */
  limit?: number;
  /** Only this job's rows. */
  jobId?: string;
  timeoutMs?: number;
  /**
   * A job's test totals, when test reports exist (`testTotals(ctx, jobId)` of
   * the test reports' use case); without it the body has no `tests`.
   */
  testTotals?: (jobId: string) => Promise<TestTotals | null | undefined>;
}

export interface NotifySummary {
  notifications_delivered: number;
  notifications_failed: number;
  notifications_skipped: number;
  notifications_given_up: number;
}

const BACKOFF_BASE_S = 5;
const BACKOFF_CAP_S = 600;

/** The notification's destination, its URL and secret opened. */
function destination(keyring: Keyring, row: ClaimedNotification): Destination {
  const n = row.notification;
  if (n.kind === 'email') return { kind: 'email', to: n.email_to ?? [] };
  const url = decrypt(keyring, n.url_enc ?? '', notificationSeal.url(n.project_id, n.id));
  if (n.kind === 'slack') return { kind: 'slack', url };
  const secret = decrypt(keyring, n.secret_enc ?? '', notificationSeal.secret(n.project_id, n.id));
  return { kind: 'webhook', url, secret };
}

async function finishedJob(
  pool: Pool,
  keyring: Keyring,
  row: ClaimedNotification,
  opts: NotifyOptions,
): Promise<FinishedJob> {
  const base = (opts.publicUrl ?? '').replace(/\/+$/, '');
  let tests: TestTotals | null | undefined;
  try {
    tests = await opts.testTotals?.(row.job.id);
  } catch (err) {
    // The message goes without its totals rather than not at all.
    log('warn', 'reading test totals for a notification failed', { job_id: row.job.id, err });
  }
  return {
    project: row.job.project_id,
    id: row.job.id,
    number: row.job.number,
    ref: row.job.ref,
    sha: row.job.sha,
    state: row.job_state,
    url: `${base}/jobs/${row.job.id}?sig=${signJobLink(keyring, row.job.id)}`,
    failedTasks: row.job_state === 'failed' ? await failedTaskNames(pool, row.job.id) : [],
    ...(tests ? { tests } : {}),
    reason: row.reason,
  };
}

/** Sends what is due, each row once at a time; never throws for a row. */
export async function deliverNotifications(
  pool: Pool,
  keyring: Keyring,
  opts: NotifyOptions = {},
): Promise<NotifySummary> {
  const summary: NotifySummary = {
    notifications_delivered: 0,
    notifications_failed: 0,
    notifications_skipped: 0,
    notifications_given_up: 0,
  };
  const giveUpAfterS = opts.giveUpAfterS ?? 6 * 3600;
  const rows = await claimDueNotifications(pool, opts.limit ?? 50, opts.jobId);
  for (const row of rows) {
    try {
      if (!branchSelected(row.notification.branches, row.job.ref, row.job.base_ref)) {
        await finishNotification(pool, row.id, { result: 'skipped' });
        summary.notifications_skipped++;
        continue;
      }
      try {
        const job = await finishedJob(pool, keyring, row, opts);
        await sendNotification(destination(keyring, row), job, {
          deliveryId: row.delivery_id,
          timeoutMs: opts.timeoutMs ?? 10_000,
          ...(opts.smtp ? { smtp: opts.smtp } : {}),
        });
        await finishNotification(pool, row.id, { result: 'delivered' });
        summary.notifications_delivered++;
      } catch (err) {
        const error = err instanceof Error ? err.message : String(err);
        const age = (Date.now() - row.created_at.getTime()) / 1000;
        if (err instanceof NotifyRefusedError || age >= giveUpAfterS) {
          await finishNotification(pool, row.id, { result: 'gave_up', error });
          summary.notifications_given_up++;
          log('warn', 'gave up sending a notification', {
            job_id: row.job.id,
            notification_id: row.notification.id,
            error,
          });
        } else {
          const retryInS = Math.min(BACKOFF_CAP_S, BACKOFF_BASE_S * 2 ** (row.attempts - 1));
          await finishNotification(pool, row.id, { retryInS, error });
          summary.notifications_failed++;
        }
      }
    } catch (err) {
      log('error', 'sending a notification failed', { job_id: row.job.id, err });
    }
  }
  return summary;
}

/** How notifications are sent, from the configuration. */
export function notifyOptions(ctx: AppContext): NotifyOptions {
  const c = ctx.config;
  return {
    ...(c.CONDUCTOR_PUBLIC_URL ? { publicUrl: c.CONDUCTOR_PUBLIC_URL } : {}),
    ...(c.CONDUCTOR_SMTP_URL
      ? { smtp: { url: c.CONDUCTOR_SMTP_URL, from: c.CONDUCTOR_SMTP_FROM } }
      : {}),
    giveUpAfterS: c.CONDUCTOR_NOTIFY_GIVE_UP_H * 3600,
    // Loaded when a notification is sent: the reports module carries the
    // XML parser, which the sweep's cold start need not load.
    testTotals: async (jobId) => (await import('./test-totals.ts')).testTotals(ctx, jobId),
  };
}
