import { type Pool, prepared, type Queryable, statement, transaction } from '../db/index.ts';
import { NotFoundError, UnavailableError, ValidationError } from '../errors.ts';
import { hashToken, newToken, workerTokenHash, workerTokenRequired } from '../http/auth.ts';
import type { HttpEvent } from '../http/index.ts';
import { type IdleGate, openGate } from '../idle/gate.ts';
import { entryOf, publishWorker } from '../idle/workers.ts';
import { log } from '../log.ts';
import { ADMIN_BEARER, type Person } from '../people/sessions.ts';
import { WORKER_BY_TOKEN, workerByTokenFor } from '../scheduler/worker-token.ts';
import * as z from '../zod.ts';
import { auditInstallation } from './audit.ts';

export const LABEL = /^[A-Za-z0-9][A-Za-z0-9_.:-]{0,62}$/;
const PROJECT_ID = /^[a-z0-9][a-z0-9-]{0,62}$/;

export const WorkerCreateSchema = z.strictObject({
  name: z.string().check(z.trim(), z.minLength(1), z.maxLength(200)),
  labels: z._default(
    z
      .array(z.string().check(z.regex(LABEL, 'labels are letters, digits and _ . : -, up to 63')))
      .check(z.maxLength(50)),
    [],
  ),
  // Untrusted workers claim only untrusted tasks (pull requests from forks and
  // the like); every other worker claims only trusted ones.
  untrusted: z._default(z.boolean(), false),
  // The projects whose tasks it may claim, or "*" for all of them. A worker
  // shared by projects of different value hands a stolen token every one of
  // them; a scoped one hands only its own.
  projects: z._default(
    z.union([
      z.literal('*'),
      z
        .array(z.string().check(z.regex(PROJECT_ID, 'a project id')))
        .check(z.minLength(1, 'at least one project, or "*" for every project'), z.maxLength(100)),
    ]),
    '*',
  ),
  // A token good for one claim: it stops working when that attempt ends.
  ephemeral: z._default(z.boolean(), false),
});
export type WorkerCreate = z.infer<typeof WorkerCreateSchema>;

export interface WorkerView {
  id: string;
  name: string;
  labels: string[];
  /** Claims only untrusted tasks when true, only trusted ones when false. */
  untrusted: boolean;
  /** The project ids whose tasks it claims, or "*" for every project. */
  projects: string[] | '*';
  /** Its token is good for one claim, and stops working when that attempt ends. */
  ephemeral: boolean;
  created_at: Date;
  last_seen_at: Date | null;
  revoked: boolean;
}

const COLUMNS = `id, name, labels, untrusted,
  case when projects is null then to_jsonb('*'::text) else to_jsonb(projects) end as projects,
  ephemeral, created_at, last_seen_at, revoked`;

/**
 * Registers a worker; its token is answered once and only its hash is kept.
 * With an idle gate, the hash goes to the gate's bucket after the commit
 * (lib/idle/workers.ts), and the gate opens: a queued task nobody could
 * claim may be this worker's. If the bucket refuses, the worker is revoked
 * again and the answer is a 503: its token was never shown.
 */
export async function createWorker(
  pool: Pool,
  input: WorkerCreate,
  gate?: IdleGate,
  by: Person = ADMIN_BEARER,
): Promise<{ worker: WorkerView; token: string }> {
  const token = newToken('cw');
  const labels = [...new Set(input.labels)].sort();
  const projects = input.projects === '*' ? null : [...new Set(input.projects)].sort();
  const worker = await transaction(pool, async (tx) => {
    if (projects) {
      const { rows } = await tx.query<{ id: string }>(
        'select id from projects where id = any($1::text[])',
        [projects],
      );
      const known = new Set(rows.map((r) => r.id));
      const unknown = (input.projects as string[])
        .map((id, i) => ({ id, i }))
        .filter(({ id }) => !known.has(id));
      if (unknown.length > 0) {
        throw new ValidationError(
          unknown.map(({ id, i }) => ({
            path: `projects.${i}`,
            message: `project "${id}" does not exist`,
          })),
        );
      }
    }
    const { rows } = await tx.query<WorkerView>(
      `insert into workers (name, token_hash, labels, untrusted, projects, ephemeral)
       values ($1, $2, $3, $4, $5, $6)
       returning ${COLUMNS}`,
      [input.name, hashToken(token), labels, input.untrusted, projects, input.ephemeral],
    );
    return rows[0]!;
  });
  if (gate) {
    try {
      await publishWorker(gate, hashToken(token), entryOf({ ...worker, projects, revoked: false }));
    } catch (err) {
      log('error', 'could not write a new worker token to the idle gate; revoked again', { err });
      await transaction(pool, (tx) =>
        tx.query('update workers set revoked = true where id = $1', [worker.id]),
      );
      throw new UnavailableError(
        'the worker could not be registered with the idle gate; register it again',
        { cause: err },
      );
    }
    await openGate(gate);
  }
  await auditInstallation(pool, by, {
    action: 'worker.create',
    subject: worker.id,
    detail: workerDetail(input.name, { ...input, labels, projects }),
  });
  return { worker, token };
}

// A worker as the installation's audit names it: its pool (trusted or
// untrusted, ephemeral), labels and project scope.
function workerDetail(
  name: string,
  w: { labels: string[]; projects: string[] | null; untrusted: boolean; ephemeral: boolean },
): string {
  const pool = `${w.untrusted ? 'untrusted' : 'trusted'}${w.ephemeral ? ', ephemeral' : ''}`;
  const labels = w.labels.length > 0 ? w.labels.join(', ') : 'none';
  const scope = w.projects ? `projects ${w.projects.join(', ')}` : 'every project';
  return `${name}: ${pool}; labels ${labels}; ${scope}`;
}

/** Every worker, newest first, revoked ones included. */
export async function listWorkers(db: Queryable): Promise<WorkerView[]> {
  const { rows } = await db.query<WorkerView>(
    `select ${COLUMNS} from workers order by created_at desc, id`,
  );
  return rows;
}

/**
 * Revokes a worker: its token stops working at once; the row stays for the
 * history. With an idle gate, its entry in the gate's bucket is replaced by a
 * revocation after the commit; if the bucket refuses, a 503 says to repeat
 * the revocation (the database already refuses the token).
 */
export async function revokeWorker(
  pool: Pool,
  id: string,
  gate?: IdleGate,
  by: Person = ADMIN_BEARER,
): Promise<void> {
  const found = await transaction(pool, async (tx) => {
    const { rows } = await tx.query<{
      name: string;
      token_hash: Buffer;
      labels: string[];
      projects: string[] | null;
      untrusted: boolean;
      ephemeral: boolean;
    }>(
      `update workers set revoked = true where id = $1
       returning name, token_hash, labels, projects, untrusted, ephemeral`,
      [id],
    );
    return rows[0];
  });
  if (!found) throw new NotFoundError(`worker ${id} does not exist`);
  await auditInstallation(pool, by, {
    action: 'worker.revoke',
    subject: id,
    detail: workerDetail(found.name, found),
  });
  if (gate) {
    try {
      await publishWorker(gate, found.token_hash, entryOf({ ...found, revoked: true }));
    } catch (err) {
      throw new UnavailableError(
        `worker ${id} is revoked in the database, but the idle gate could not be told; revoke it again`,
        { cause: err },
      );
    }
  }
}

export interface AuthenticatedWorker {
  id: string;
  name: string;
  labels: string[];
}

const REQUIRE_WORKER = `with ${WORKER_BY_TOKEN} select id, name, labels from worker`;

/**
 * Requires the token of a worker that is not revoked; any other token, or
 * none, is a 401. Marks the worker seen (at most once a minute).
 */
export async function requireWorker(db: Pool, event: HttpEvent): Promise<AuthenticatedWorker> {
  return requireWorkerByHash(db, workerTokenHash(event));
}

/**
 * requireWorker for a token already hashed (lib/http/auth.ts: workerTokenHash).
 * With `completingLease`, an ephemeral worker's token also passes for the
 * completion of its one lease after that attempt ended (a repeated completion).
 */
export async function requireWorkerByHash(
  db: Pool,
  tokenHash: Buffer,
  completingLease?: string,
): Promise<AuthenticatedWorker> {
  const rows = await statement<AuthenticatedWorker>(
    db,
    completingLease === undefined
      ? prepared('conductor_require_worker', REQUIRE_WORKER, [tokenHash])
      : prepared('conductor_require_worker_completing', REQUIRE_WORKER_COMPLETING, [
          tokenHash,
          completingLease,
        ]),
  );
  const worker = rows[0];
  if (!worker) throw workerTokenRequired();
  return worker;
}

const REQUIRE_WORKER_COMPLETING = `with ${workerByTokenFor('$2')} select id, name, labels from worker`;
