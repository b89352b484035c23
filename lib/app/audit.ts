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
  type CONTROL_PLANE,
  type InstallationEntry,
  type InstallationEvent,
  insertAuditEvent,
  insertInstallationEvent,
  insertJobAuditEvent,
  listAuditEvents,
  listInstallationEvents,
} from '../people/audit.ts';
import type { Person } from '../people/sessions.ts';

export { CONTROL_PLANE } from '../people/audit.ts';
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

/**
 * Records an event of the installation (a project created or deleted, a
 * worker registered or revoked, a session ended, a pool changed, a pool's
 * runner launched or its worker revoked), after it committed; as
 * `audit`, a row that cannot be written is logged and the action stands.
 */
export async function auditInstallation(
  db: Queryable,
  person: Person | typeof CONTROL_PLANE,
  entry: InstallationEntry,
): Promise<void> {
  try {
    await insertInstallationEvent(db, person, entry);
  } catch (err) {
    log('error', 'an audit row could not be written', { err, action: entry.action });
  }
}

/** The installation's events as the API shows them (`GET /v1/audit`), newest first. */
export async function listInstallationAudit(
  db: Queryable,
  limit: number,
  before?: number,
): Promise<Array<Omit<InstallationEvent, 'actor_forge'>>> {
  const rows = await listInstallationEvents(db, limit, before);
  return rows.map((r) => ({
    id: r.id,
    at: r.at,
    actor: r.actor,
    action: r.action,
    subject: r.subject,
    detail: r.detail,
    session_id: r.session_id,
  }));
}
