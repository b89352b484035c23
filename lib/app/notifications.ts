// A project's notifications (issue #54): where to say that a job finished
// (a webhook, a Slack incoming webhook, email) and when (failed, fixed,
// always; on which branches). The admin's, as the project's other settings;
// every change audited. The URL is sealed like a secret and shown as its host
// only; a webhook's signing secret is made here and shown once. Sending is
// lib/app/notify.ts.
import { randomBytes, randomUUID } from 'node:crypto';
import type { Pool, Queryable } from '../db/index.ts';
import { ConflictError, NotFoundError, ValidationError } from '../errors.ts';
import { refusedAddress } from '../forge/client.ts';
import { branchPatternProblem, MAX_BRANCH_PATTERNS } from '../notify/branches.ts';
import {
  countNotifications,
  deleteNotificationRow,
  insertNotification,
  listNotificationRows,
  MAX_NOTIFICATIONS,
  type NotificationRow,
} from '../notify/store.ts';
import { ADMIN_BEARER, type Person } from '../people/sessions.ts';
import { encrypt, type Keyring } from '../secrets.ts';
import { NOTIFICATION_EVENTS, NOTIFICATION_KINDS } from '../states.ts';
import * as z from '../zod.ts';
import { audit } from './audit.ts';
import { getProject } from './projects.ts';

/** Most addresses one email notification goes to. */
export const MAX_EMAIL_RECIPIENTS = 20;

const NotificationUrl = z.string().check(
  z.trim(),
  z.maxLength(2000),
  z.regex(/^https?:\/\/\S+$/i, 'must be an http(s) URL'),
  z.superRefine((value, ctx) => {
    let parsed: URL;
    try {
      parsed = new URL(value);
    } catch {
      ctx.addIssue({ code: 'custom', message: 'is not a valid URL' });
      return;
    }
    if (parsed.username || parsed.password) {
      ctx.addIssue({ code: 'custom', message: 'must not carry a user name or password' });
    }
  }),
);

export const NotificationCreateSchema = z
  .strictObject({
    kind: z.enum(NOTIFICATION_KINDS),
    url: z.optional(NotificationUrl),
    to: z.optional(
      z
        .array(z.string().check(z.trim(), z.email(), z.maxLength(320)))
        .check(z.minLength(1), z.maxLength(MAX_EMAIL_RECIPIENTS)),
    ),
    on: z.array(z.enum(NOTIFICATION_EVENTS)).check(
      z.minLength(1),
      z.maxLength(NOTIFICATION_EVENTS.length),
      z.refine((on) => new Set(on).size === on.length, 'lists an event twice'),
    ),
    branches: z.optional(
      z
        .array(z.string().check(z.minLength(1), z.maxLength(255)))
        .check(z.maxLength(MAX_BRANCH_PATTERNS)),
    ),
  })
  .check(
    z.superRefine((input, ctx) => {
      if (input.kind === 'email') {
        if (!input.to) {
          ctx.addIssue({ code: 'custom', path: ['to'], message: 'required for email' });
        }
        if (input.url) {
          ctx.addIssue({ code: 'custom', path: ['url'], message: 'not used by email (give to)' });
        }
      } else {
        if (!input.url) {
          ctx.addIssue({ code: 'custom', path: ['url'], message: `required for ${input.kind}` });
        }
        if (input.to) {
          ctx.addIssue({ code: 'custom', path: ['to'], message: `not used by ${input.kind}` });
        }
      }
      for (const [i, pattern] of (input.branches ?? []).entries()) {
        const problem = branchPatternProblem(pattern);
        if (problem) ctx.addIssue({ code: 'custom', path: ['branches', i], message: problem });
      }
    }),
  );
export type NotificationCreate = z.infer<typeof NotificationCreateSchema>;

/** A notification as the API shows it: never the URL (its host only) nor the signing secret. */
export interface NotificationView {
  id: string;
  kind: string;
  /** `https://hooks.slack.com`: where the URL points, not the URL. */
  url_host?: string;
  to?: string[];
  on: string[];
  branches: string[] | null;
  created_at: Date;
}

function view(row: NotificationRow): NotificationView {
  return {
    id: row.id,
    kind: row.kind,
    ...(row.url_host ? { url_host: row.url_host } : {}),
    ...(row.email_to ? { to: row.email_to } : {}),
    on: row.on_events,
    branches: row.branches,
    created_at: row.created_at,
  };
}

/** Where each sealed value of a notification lives, bound into its ciphertext. */
export const notificationSeal = {
  url: (projectId: string, id: string) => `project/${projectId}/notification/${id}/url`,
  secret: (projectId: string, id: string) => `project/${projectId}/notification/${id}/secret`,
};

/**
 * Adds a notification to a project; a webhook's answer carries its signing
 * secret, shown this once. A URL whose host is not a public address is
 * refused (400 naming `url`) unless CONDUCTOR_ALLOW_PRIVATE_FORGES=1, as a
 * forge's is; it is checked again at every send.
 */
export async function createNotification(
  pool: Pool,
  keyring: Keyring,
  projectId: string,
  input: NotificationCreate,
  by: Person = ADMIN_BEARER,
): Promise<{ notification: NotificationView; secret?: string }> {
  await getProject(pool, projectId);
  if (input.url) {
    const refused = await refusedAddress(input.url);
    if (refused) {
      throw new ValidationError([
        { path: 'url', message: refused.split(input.url).join('the URL') },
      ]);
    }
  }
  if ((await countNotifications(pool, projectId)) >= MAX_NOTIFICATIONS) {
    throw new ConflictError(`a project may have at most ${MAX_NOTIFICATIONS} notifications`);
  }
  const id = randomUUID();
  // Hex, as the webhook secret, so it never starts with "-" when pasted as an option.
  const secret = input.kind === 'webhook' ? randomBytes(24).toString('hex') : undefined;
  const row = await insertNotification(pool, {
    id,
    project_id: projectId,
    kind: input.kind,
    url_enc: input.url ? encrypt(keyring, input.url, notificationSeal.url(projectId, id)) : null,
    url_host: input.url ? new URL(input.url).origin : null,
    email_to: input.to ?? null,
    secret_enc: secret ? encrypt(keyring, secret, notificationSeal.secret(projectId, id)) : null,
    on_events: input.on,
    branches: input.branches ?? null,
  });
  const notification = view(row);
  await audit(pool, by, { projectId, action: 'notification', detail: `${describe(row)} added` });
  return secret ? { notification, secret } : { notification };
}

function describe(row: NotificationRow): string {
  const where = row.kind === 'email' ? (row.email_to ?? []).join(', ') : row.url_host;
  return `${row.kind} ${row.id} (${where}; on ${row.on_events.join(', ')})`;
}

/** A project's notifications. */
export async function listNotifications(
  db: Queryable,
  projectId: string,
): Promise<NotificationView[]> {
  await getProject(db, projectId);
  return (await listNotificationRows(db, projectId)).map(view);
}

/** Removes a notification (what it still had to send goes with it). */
export async function deleteNotification(
  pool: Pool,
  projectId: string,
  id: string,
  by: Person = ADMIN_BEARER,
): Promise<void> {
  if (!/^[0-9a-f-]{36}$/i.test(id)) {
    throw new NotFoundError(`project "${projectId}" has no notification ${id}`);
  }
  const row = await deleteNotificationRow(pool, projectId, id);
  if (!row) throw new NotFoundError(`project "${projectId}" has no notification ${id}`);
  await audit(pool, by, { projectId, action: 'notification', detail: `${describe(row)} deleted` });
}
