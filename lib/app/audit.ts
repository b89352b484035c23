// The audit (issue #31): every action a person takes on a project is a row,
// who (`@login` or `admin token`), what, when, from which session. Use cases
// call `audit` once their action has committed; the API lists a project's
// rows newest first.
import type { Queryable } from '../db/index.ts';
import { NotFoundError } from '../errors.ts';
import { log } from '../log.ts';
import {
  type AuditEntry,
  type AuditEvent,
  insertAuditEvent,
  insertJobAuditEvent,
  listAuditEvents,
} from '../people/audit.ts';
import type { Person } from '../people/sessions.ts';

export type { AuditEntry, Person };

/**
 * Records that `person` did `entry.action` (after the action committed). A
 * row that cannot be written is logged, never undoes or fails the action
 * that already happened.
 */
export async function audit(db: Queryable, person: Person, entry: AuditEntry): Promise<void> {
  try {
    await insertAuditEvent(db, person, entry);
  } catch (err) {
    log('error', 'an audit row could not be written', { err, action: entry.action });
  }
}

/** `audit` for an action on a job, when only the job's id is at hand (its project is read from it). */
export async function auditJob(
  db: Queryable,
  person: Person,
  jobId: string,
  action: string,
  detail = '',
): Promise<void> {
  try {
    await insertJobAuditEvent(db, person, jobId, action, detail);
  } catch (err) {
    log('error', 'an audit row could not be written', { err, action });
  }
}

/** One event as the API shows it (`GET /v1/projects/{id}/audit`). */
export interface AuditView {
  id: number;
  at: Date;
  actor: string;
  action: string;
  job_id?: string;
  detail: string;
  session_id: string | null;
}

/** A project's events, newest first; `before` is an event's id (a 404 for no such project). */
export async function listProjectAudit(
  db: Queryable,
  projectId: string,
  limit: number,
  before?: number,
): Promise<AuditView[]> {
  const rows: AuditEvent[] | null = await listAuditEvents(db, projectId, limit, before);
  if (rows === null) throw new NotFoundError(`project "${projectId}" does not exist`);
  return rows.map((r) => ({
    id: r.id,
    at: r.at,
    actor: r.actor,
    action: r.action,
    ...(r.job_id ? { job_id: r.job_id } : {}),
    detail: r.detail,
    session_id: r.session_id,
  }));
}
