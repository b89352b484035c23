// The push channel's ticket (issue #52): what a runner shows the WebSocket
// API's $connect so that it is let in without the database. The control
// plane hands it out where it has just checked the worker's token (a claim
// answered "nothing to claim"); it names the worker's scope (labels, trust,
// projects) and an expiry, and is signed with a key derived from the
// keyring's (HKDF, its own purpose), so $connect checks it with no
// connection and no token look-up. It opens nothing but the channel: a
// hint, never a task.
import { createHmac, hkdfSync, timingSafeEqual } from 'node:crypto';
import type { Keyring } from '../secrets.ts';

/** What a ticket says of its runner. */
export interface TicketScope {
  /** Who holds it: the first 16 hex digits of its token's hash (never the token). */
  worker: string;
  labels: string[];
  untrusted: boolean;
  /** The projects whose tasks it may claim, or "*". */
  projects: string[] | '*';
}

export interface Ticket extends TicketScope {
  /** Expiry, seconds since the epoch. */
  exp: number;
}

/** How long a ticket opens the channel: a runner reconnects every 2 hours at most (API Gateway's limit). */
export const TICKET_TTL_S = 10 * 60;

const b64 = (b: Buffer) => b.toString('base64url');

function keyFor(secret: Buffer): Buffer {
  return Buffer.from(
    hkdfSync('sha256', secret, Buffer.alloc(0), 'conductor push channel ticket', 32),
  );
}

function mac(secret: Buffer, payload: string): Buffer {
  return createHmac('sha256', keyFor(secret)).update(payload, 'utf8').digest();
}

/** Signs a ticket for `scope`, good for `ttlS`: `<key id>.<payload>.<mac>`, base64url. */
export function issueTicket(
  keyring: Keyring,
  scope: TicketScope,
  ttlS = TICKET_TTL_S,
  now = Date.now(),
): string {
  const key = keyring.keys.get(keyring.primaryId);
  if (!key) throw new Error('the keyring has no primary key');
  const body: Ticket = { ...scope, exp: Math.floor(now / 1000) + ttlS };
  const payload = b64(Buffer.from(JSON.stringify(body), 'utf8'));
  return `${keyring.primaryId}.${payload}.${b64(mac(key, payload))}`;
}

/** Why a ticket is refused. */
export class TicketError extends Error {}

/** Checks a ticket's signature (under any key of the keyring) and expiry; answers what it says. */
export function verifyTicket(keyring: Keyring, ticket: string, now = Date.now()): Ticket {
  if (ticket.length > 8_192) throw new TicketError('the ticket is too long');
  const [id, payload, sig, ...rest] = ticket.split('.');
  if (!id || !payload || !sig || rest.length > 0) throw new TicketError('not a ticket');
  const key = keyring.keys.get(id);
  if (!key) throw new TicketError('the ticket is signed with a key this control plane lacks');
  const want = mac(key, payload);
  const got = Buffer.from(sig, 'base64url');
  if (got.length !== want.length || !timingSafeEqual(got, want)) {
    throw new TicketError('the ticket signature does not match');
  }
  let body: Ticket;
  try {
    body = JSON.parse(Buffer.from(payload, 'base64url').toString('utf8')) as Ticket;
  } catch {
    throw new TicketError('the ticket does not parse');
  }
  if (typeof body.exp !== 'number' || body.exp * 1000 <= now) {
    throw new TicketError('the ticket has expired');
  }
  return body;
}

/** Whether a connection's runner may claim a task of this shape (the claim's own rule). */
export function serves(
  scope: TicketScope,
  task: { labels: string[]; trusted: boolean; project: string },
): boolean {
  return (
    scope.untrusted === !task.trusted &&
    task.labels.every((l) => scope.labels.includes(l)) &&
    (scope.projects === '*' || scope.projects.includes(task.project))
  );
}
