// Webhooks that survive a resume. A paused Aurora takes 15 to 30 s to answer
// again and GitHub gives up after 10 s without redelivering, so the webhook
// function waits only a few seconds for a connection. If none comes, a
// delivery whose signature it can check without the database (against the
// project's sealed secret, kept from an earlier delivery in the directory)
// goes on a queue and is answered 202 at once; the queue's consumer does the
// rest (lib/app/webhook.ts handleDelivery) once the database is back.
import { createHash } from 'node:crypto';
import type { Pool } from '../db/index.ts';
import type { ForgeKind } from '../forge/webhook.ts';
import type { IdleGate } from './gate.ts';

/** A delivery as the forge sent it. */
export interface QueuedDelivery {
  forge: ForgeKind;
  headers: Record<string, string | undefined>;
  body: Buffer;
  /** When the API received it (API Gateway's request time): what superseding goes by. */
  receivedAt?: Date;
}

/** What checks a queued delivery's signature without the database. */
export interface DirectoryEntry {
  projectId: string;
  repo: string;
  /** The project's webhook secret, sealed as in the database. */
  secretEnc: string;
}

export interface DeliveryQueue {
  send(delivery: QueuedDelivery): Promise<void>;
}

/** Per repository, the project and sealed secret the last verified delivery used. */
export interface WebhookDirectory {
  get(forge: ForgeKind, repo: string): Promise<DirectoryEntry | undefined>;
  put(forge: ForgeKind, entry: DirectoryEntry): Promise<void>;
}

export interface WebhookIntake {
  queue: DeliveryQueue;
  directory: WebhookDirectory;
}

/** The directory's key for a repository (names compare case-insensitively, as the lookup does). */
export function directoryKey(forge: ForgeKind, repo: string): string {
  return `webhooks/${forge}/${createHash('sha256').update(repo.toLowerCase()).digest('hex')}.json`;
}

/** A queue and directory in memory (tests). */
export class MemoryIntake implements WebhookIntake {
  readonly sent: QueuedDelivery[] = [];
  readonly entries = new Map<string, DirectoryEntry>();
  readonly queue: DeliveryQueue = { send: async (d) => void this.sent.push(d) };
  readonly directory: WebhookDirectory = {
    get: async (forge, repo) => this.entries.get(directoryKey(forge, repo)),
    put: async (forge, entry) => void this.entries.set(directoryKey(forge, entry.repo), entry),
  };
}

/** The queue message: JSON, the body inline (base64) or, when too large, in S3 under `bodyKey`. */
export interface DeliveryMessage {
  forge: ForgeKind;
  headers: Record<string, string | undefined>;
  body?: string;
  bodyKey?: string;
  /** When the API received the delivery (ISO time). */
  receivedAt?: string;
}

/**
 * Whether the pool gets a connection within `ms`. A connect still under way
 * then goes on (it is what wakes a paused Aurora) and its client goes back
 * to the pool when it comes.
 */
export async function databaseAnswers(pool: Pool, ms: number): Promise<boolean> {
  const connecting = pool.connect();
  let timer: NodeJS.Timeout | undefined;
  const late = new Promise<'late'>((done) => {
    timer = setTimeout(() => done('late'), ms);
  });
  try {
    const first = await Promise.race([connecting, late]);
    if (first === 'late') {
      connecting.then(
        (client) => client.release(),
        () => {},
      );
      return false;
    }
    first.release();
    return true;
  } catch {
    return false;
  } finally {
    clearTimeout(timer);
  }
}

/**
 * The directory as objects of the gate's bucket, for functions that carry no
 * S3 client (the api rewrites an entry when a project's secret rotates).
 */
export function gateDirectory(gate: IdleGate): WebhookDirectory {
  return {
    get: async (forge, repo) => {
      const text = await gate.store.read(directoryKey(forge, repo));
      return text === undefined ? undefined : (JSON.parse(text) as DirectoryEntry);
    },
    put: (forge, entry) => gate.write(directoryKey(forge, entry.repo), JSON.stringify(entry)),
  };
}
