// The audit rows: who did what to a project (or one of its jobs), when, and
// from which session. Written after the action commits; read newest first.
import type { Queryable } from '../db/index.ts';
import { actorName, type Person } from './sessions.ts';

export interface AuditEntry {
  projectId: string;
  jobId?: string | null;
  /** What was done: `rerun`, `cancel`, `approve`, `unblock`, `settings`, `secret`, ... */
  action: string;
  /** The particulars, in words (`failed tasks only, as job #12`, `secret DEPLOY_KEY set`). */
  detail?: string;
}

export interface AuditEvent {
  id: number;
  at: Date;
  actor: string;
  actor_forge: string | null;
  session_id: string | null;
  action: string;
  job_id: string | null;
  detail: string;
}

/** Writes one audit row for an action a person took. */
export async function insertAuditEvent(
  db: Queryable,
  person: Person,
  entry: AuditEntry,
): Promise<void> {
  await db.query(
    `insert into audit_events (project_id, job_id, actor, actor_forge, session_id, action, detail)
     values ($1, $2, $3, $4, $5, $6, $7)`,
    [
      entry.projectId,
      entry.jobId ?? null,
      actorName(person),
      person.kind === 'forge' ? person.forge : null,
      person.sessionId,
      entry.action,
      entry.detail ?? '',
    ],
  );
}

/** Writes one audit row for an action on a job, the project read from the job; false when there is no such job. */
export async function insertJobAuditEvent(
  db: Queryable,
  person: Person,
  jobId: string,
  action: string,
  detail = '',
): Promise<boolean> {
  const { rowCount } = await db.query(
    `insert into audit_events (project_id, job_id, actor, actor_forge, session_id, action, detail)
     select project_id, id, $2, $3, $4, $5, $6 from jobs where id = $1`,
    [
      jobId,
      actorName(person),
      person.kind === 'forge' ? person.forge : null,
      person.sessionId,
      action,
      detail,
    ],
  );
  return rowCount === 1;
}

/** A project's audit rows, newest first; `before` is an event's id. Null: no such project. */
export async function listAuditEvents(
  db: Queryable,
  projectId: string,
  limit: number,
  before?: number,
): Promise<AuditEvent[] | null> {
  const found = await db.query('select 1 from projects where id = $1', [projectId]);
  if (found.rowCount === 0) return null;
  const { rows } = await db.query<AuditEvent>(
    `select id, at, actor, actor_forge, session_id, action, job_id, detail
       from audit_events
      where project_id = $1 and ($2::bigint is null or id < $2)
      order by id desc limit $3`,
    [projectId, before ?? null, limit],
  );
  return rows;
}

/** The latest audit rows of one job (its page shows them: "approved by @alice 2 min ago"). */
export async function jobAuditEvents(
  db: Queryable,
  jobId: string,
  limit = 20,
): Promise<AuditEvent[]> {
  const { rows } = await db.query<AuditEvent>(
    `select id, at, actor, actor_forge, session_id, action, job_id, detail
       from audit_events where job_id = $1 order by id desc limit $2`,
    [jobId, limit],
  );
  return rows;
}

/** An event of the installation rather than of one project (issue #46): a project, worker or session. */
export interface InstallationEntry {
  /**
   * `project.create`, `project.update`, `project.delete`, `worker.create`,
   * `worker.revoke`, `session.revoke`, `pool.create`, `pool.update`,
   * `pool.delete`, `pool.launch`, `pool.revoke`.
   */
  action: string;
  /** The id of what it concerns. */
  subject: string;
  detail?: string;
}

export interface InstallationEvent {
  id: number;
  at: Date;
  actor: string;
  actor_forge: string | null;
  session_id: string | null;
  action: string;
  subject: string;
  detail: string;
}

/**
 * What the control plane does on its own (a pool's runner launched, its
 * worker revoked) is recorded under this name rather than a person's.
 */
export const CONTROL_PLANE = { kind: 'control plane' } as const;

/** Writes one row of the installation's audit. */
export async function insertInstallationEvent(
  db: Queryable,
  person: Person | typeof CONTROL_PLANE,
  entry: InstallationEntry,
): Promise<void> {
  await db.query(
    `insert into installation_events (actor, actor_forge, session_id, action, subject, detail)
     values ($1, $2, $3, $4, $5, $6)`,
    [
      person.kind === 'control plane' ? 'conductor' : actorName(person),
      person.kind === 'forge' ? person.forge : null,
      person.kind === 'control plane' ? null : person.sessionId,
      entry.action,
      entry.subject,
      entry.detail ?? '',
    ],
  );
}

/** The installation's audit rows, newest first; `before` is an event's id. */
export async function listInstallationEvents(
  db: Queryable,
  limit: number,
  before?: number,
): Promise<InstallationEvent[]> {
  const { rows } = await db.query<InstallationEvent>(
    `select id, at, actor, actor_forge, session_id, action, subject, detail
       from installation_events
      where ($1::bigint is null or id < $1)
      order by id desc limit $2`,
    [before ?? null, limit],
  );
  return rows;
}
