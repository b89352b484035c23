// Worker tokens in the gate's bucket: for each live worker, the hash of its
// token with its labels and scope, written when the worker is registered and
// replaced by a revocation when it is revoked. A closed gate answers a claim
// from these alone: an unknown or revoked token 401, a known one 204 (no job
// is open, so nothing is claimable), a label it was not registered with 400,
// all without a connection. Once `workers/synced` exists (written after every
// worker registered before this was copied in), a token the bucket does not
// know is unknown.
import type { Queryable } from '../db/index.ts';
import type { IdleGate } from './gate.ts';

export const WORKERS_PREFIX = 'workers/';
export const WORKERS_SYNCED_KEY = `${WORKERS_PREFIX}synced`;

/** What the bucket keeps of a worker. */
export interface WorkerEntry {
  labels: string[];
  /** The projects whose tasks it may claim, or "*" for all. */
  projects: string[] | '*';
  untrusted: boolean;
  ephemeral: boolean;
  revoked: boolean;
}

/** The bucket's key for a token's hash. */
export function workerKey(tokenHash: Buffer): string {
  return `${WORKERS_PREFIX}${tokenHash.toString('hex')}.json`;
}

/** What a closed gate knows of a token. */
export type TokenLookup =
  | { kind: 'known'; entry: WorkerEntry }
  /** Revoked, or unknown once the bucket holds every worker: a 401. */
  | { kind: 'refused' }
  /** The bucket cannot say (not yet synced, unreadable): the database must. */
  | { kind: 'ask' };

/**
 * How long a container keeps a token's entry. Longer than the gate's cache:
 * an idle runner's token is read once per period, not the marker's 30 s. A
 * token revoked meanwhile gets 204 (never a task) from a closed gate in a
 * container that read it before, for at most this long; with the gate open
 * every claim reaches the database, which refuses it at once.
 */
export const TOKEN_CACHE_MS = 10 * 60_000;

/** Looks a token's hash up in the gate's bucket (kept TOKEN_CACHE_MS in this container). */
export async function lookUpToken(gate: IdleGate, tokenHash: Buffer): Promise<TokenLookup> {
  try {
    const text = await gate.cachedRead(workerKey(tokenHash), { ttlMs: TOKEN_CACHE_MS });
    if (text !== undefined) {
      const entry = JSON.parse(text) as WorkerEntry;
      return entry.revoked ? { kind: 'refused' } : { kind: 'known', entry };
    }
    const synced = await gate.cachedRead(WORKERS_SYNCED_KEY, { forever: true });
    return synced === undefined ? { kind: 'ask' } : { kind: 'refused' };
  } catch {
    return { kind: 'ask' };
  }
}

/** Writes a worker's entry (after the commit that made it so). Throws when the bucket refuses. */
export async function publishWorker(
  gate: IdleGate,
  tokenHash: Buffer,
  entry: WorkerEntry,
): Promise<void> {
  await gate.write(workerKey(tokenHash), JSON.stringify(entry));
}

interface WorkerRow {
  token_hash: Buffer;
  labels: string[];
  projects: string[] | null;
  untrusted: boolean;
  ephemeral: boolean;
  revoked: boolean;
}

/** A worker row as the bucket keeps it. */
export function entryOf(row: Omit<WorkerRow, 'token_hash'>): WorkerEntry {
  return {
    labels: row.labels,
    projects: row.projects ?? '*',
    untrusted: row.untrusted,
    ephemeral: row.ephemeral,
    revoked: row.revoked,
  };
}

/**
 * Copies every live worker into the bucket, then writes `workers/synced`,
 * once per bucket (the sweep calls it; workers registered before the bucket
 * kept tokens are otherwise unknown to it). Revoked workers need no entry: an
 * unknown token is refused. Answers how many were written.
 */
export async function syncWorkers(db: Queryable, gate: IdleGate): Promise<number> {
  if ((await gate.cachedRead(WORKERS_SYNCED_KEY, { forever: true })) !== undefined) return 0;
  const { rows } = await db.query<WorkerRow>(
    `select token_hash, labels, projects, untrusted, ephemeral, revoked
       from workers
      where not revoked and not (ephemeral and claimed_lease is not null)`,
  );
  for (const row of rows) await publishWorker(gate, row.token_hash, entryOf(row));
  await gate.write(WORKERS_SYNCED_KEY, new Date().toISOString());
  return rows.length;
}
