// Sessions kept in PostgreSQL. The cookie (lib/pages/access.ts) carries a
// random id, signed by the server and bound to the admin token; the table
// keeps the id's SHA-256 and who signed in. Signing out deletes the row, so
// the cookie opens nothing from that moment, and a copy of the table opens
// no session.
import { createHash } from 'node:crypto';
import { type Pool, type Queryable, transaction } from '../db/index.ts';
import type { ForgeKind } from '../forge/forge.ts';
import { peopleNow } from './clock.ts';

/** Who acts: the admin token (a session, or the API's bearer), or a person signed in with a forge. */
export type Person =
  | { kind: 'admin'; sessionId: string | null }
  | {
      kind: 'forge';
      forge: ForgeKind;
      login: string;
      /** Null when the person acted on the forge itself (a check run's Re-run on GitHub). */
      sessionId: string | null;
    };

/** The admin token's bearer, outside any session (the JSON API). */
export const ADMIN_BEARER: Person = { kind: 'admin', sessionId: null };

const sha256 = (text: string) => createHash('sha256').update(text, 'utf8').digest();

/** Who a new session is for. */
export type SignedIn = { kind: 'admin' } | { kind: 'forge'; forge: ForgeKind; login: string };

/** Keeps a new session (its cookie's id and expiry); answers the person it stands for. */
export async function createSession(
  db: Queryable,
  cookieId: string,
  expiresS: number,
  who: SignedIn,
): Promise<Person> {
  const { rows } = await db.query<{ id: string }>(
    `insert into sessions (token_hash, kind, forge, login, expires_at)
     values ($1, $2, $3, $4, to_timestamp($5)) returning id`,
    [
      sha256(cookieId),
      who.kind,
      who.kind === 'forge' ? who.forge : null,
      who.kind === 'forge' ? who.login : null,
      expiresS,
    ],
  );
  const id = rows[0]!.id;
  return who.kind === 'admin'
    ? { kind: 'admin', sessionId: id }
    : { kind: 'forge', forge: who.forge, login: who.login, sessionId: id };
}

/** The person of an open session (its cookie's id), or null: signed out, revoked or over. */
export async function findSession(db: Queryable, cookieId: string): Promise<Person | null> {
  const { rows } = await db.query<{
    id: string;
    kind: 'admin' | 'forge';
    forge: ForgeKind | null;
    login: string | null;
  }>(
    `select id, kind, forge, login from sessions
      where token_hash = $1 and expires_at > to_timestamp($2)`,
    [sha256(cookieId), peopleNow() / 1000],
  );
  const row = rows[0];
  if (!row) return null;
  return row.kind === 'admin'
    ? { kind: 'admin', sessionId: row.id }
    : { kind: 'forge', forge: row.forge!, login: row.login!, sessionId: row.id };
}

/** Ends a session at once (its cookie's id); answers whether it was open. */
export async function endSession(pool: Pool, cookieId: string): Promise<boolean> {
  const { rowCount } = await transaction(pool, (tx) =>
    tx.query('delete from sessions where token_hash = $1', [sha256(cookieId)]),
  );
  return rowCount === 1;
}

/** An open session as an admin sees it: who, since when, until when; never its cookie. */
export interface SessionView {
  id: string;
  kind: 'admin' | 'forge';
  forge: ForgeKind | null;
  login: string | null;
  created_at: Date;
  expires_at: Date;
}

/** The open sessions, newest first (at most 1,000). */
export async function listSessions(db: Queryable): Promise<SessionView[]> {
  const { rows } = await db.query<SessionView>(
    `select id, kind, forge, login, created_at, expires_at from sessions
      where expires_at > to_timestamp($1) order by created_at desc, id limit 1000`,
    [peopleNow() / 1000],
  );
  return rows;
}

/** Ends a session by its id (revocation), at once; answers whether it was there. */
export async function endSessionById(pool: Pool, id: string): Promise<boolean> {
  const { rowCount } = await transaction(pool, (tx) =>
    tx.query('delete from sessions where id = $1', [id]),
  );
  return rowCount === 1;
}

/** Ends every session of a person on a forge (revocation); answers how many. */
export async function endSessionsOf(pool: Pool, forge: ForgeKind, login: string): Promise<number> {
  const { rowCount } = await transaction(pool, (tx) =>
    tx.query(
      `delete from sessions where kind = 'forge' and forge = $1 and lower(login) = lower($2)`,
      [forge, login],
    ),
  );
  return rowCount ?? 0;
}

/** Deletes sessions that ended more than a day ago, a few at a time (called on sign-in). */
export async function purgeEndedSessions(pool: Pool): Promise<void> {
  await transaction(pool, (tx) =>
    tx.query(
      `delete from sessions where id in (
         select id from sessions where expires_at < to_timestamp($1) - interval '1 day' limit 100)`,
      [peopleNow() / 1000],
    ),
  );
}

/** How a person is named in the audit and on the pages: `@login`, or `admin token`. */
export function actorName(person: Person): string {
  return person.kind === 'admin' ? 'admin token' : `@${person.login}`;
}
