// Bearer tokens at the HTTP edge: hashing, minting, the admin check and the
// worker token's 401. Which worker a token belongs to is a query, and lives
// with the workers (lib/app/workers.ts: requireWorker).
import { createHash, randomBytes, timingSafeEqual } from 'node:crypto';
import { UnauthorizedError } from '../errors.ts';
import { bearerToken, type HttpEvent } from './index.ts';

/** SHA-256 of a bearer token: what the database keeps instead of the token. */
export function hashToken(token: string): Buffer {
  return createHash('sha256').update(token, 'utf8').digest();
}

/** A new random bearer token; the prefix says what kind it is when it turns up in a log. */
export function newToken(prefix: 'cw' | 'ca'): string {
  return `${prefix}_${randomBytes(32).toString('base64url')}`;
}

/** Requires the admin token; any other token, or none, is a 401. */
export function requireAdmin(event: HttpEvent, adminToken: string): void {
  const token = bearerToken(event);
  // Compare digests: equal lengths for timingSafeEqual, and no early exit
  // that tells an attacker how much of a guess was right.
  if (!token || !timingSafeEqual(hashToken(token), hashToken(adminToken))) {
    throw new UnauthorizedError('an admin token is required');
  }
}

/** The 401 for a missing, unknown or revoked worker token. */
export function workerTokenRequired(): UnauthorizedError {
  return new UnauthorizedError('a worker token is required');
}

/** The token's hash, or a 401 when the request carries no bearer token. */
export function workerTokenHash(event: HttpEvent): Buffer {
  const token = bearerToken(event);
  if (!token) throw workerTokenRequired();
  return hashToken(token);
}
