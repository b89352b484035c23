// Who may read a page: a signed-in session (a cookie), or, for one job, the
// signed link a commit status carries. Both are HMACs under keys derived from
// the secret key (CONDUCTOR_SECRET_KEY), so nothing is stored: the first key
// of the keyring signs, every key verifies, as it does for sealed values.
import { createHash, createHmac, hkdfSync, randomBytes, timingSafeEqual } from 'node:crypto';
import type { Keyring } from '../secrets.ts';

/** How long the link in a commit status opens its job's page. */
export const JOB_LINK_TTL_S = 90 * 24 * 3600;
/** How long a sign-in lasts. */
export const SESSION_TTL_S = 7 * 24 * 3600;
export const SESSION_COOKIE = 'conductor_session';

type Purpose = 'job-link' | 'session' | 'csrf' | 'sign-in';

// One derived key per purpose and key, so a signature made for one purpose
// never verifies as another, and the secret key itself never signs.
const derived = new WeakMap<Buffer, Map<Purpose, Buffer>>();
function keyFor(key: Buffer, purpose: Purpose): Buffer {
  let byPurpose = derived.get(key);
  if (!byPurpose) {
    byPurpose = new Map();
    derived.set(key, byPurpose);
  }
  let out = byPurpose.get(purpose);
  if (!out) {
    out = Buffer.from(hkdfSync('sha256', key, 'conductor pages', `conductor ${purpose} v1`, 32));
    byPurpose.set(purpose, out);
  }
  return out;
}

function mac(key: Buffer, purpose: Purpose, message: string): Buffer {
  return createHmac('sha256', keyFor(key, purpose)).update(message, 'utf8').digest();
}

function primary(keyring: Keyring): Buffer {
  const key = keyring.keys.get(keyring.primaryId);
  if (!key) throw new Error('the keyring has no primary key');
  return key;
}

/** True when `given` (base64url) is the MAC of `message` under any key of the keyring. */
function verifies(keyring: Keyring, purpose: Purpose, message: string, given: string): boolean {
  const bytes = Buffer.from(given, 'base64url');
  // Only the canonical spelling: base64url's last character has spare bits.
  if (bytes.length !== 32 || bytes.toString('base64url') !== given) return false;
  for (const key of keyring.keys.values()) {
    if (timingSafeEqual(mac(key, purpose, message), bytes)) return true;
  }
  return false;
}

const nowS = () => Math.floor(Date.now() / 1000);

const DAY_S = 24 * 3600;

/**
 * When a link signed now expires: the end of the UTC day `JOB_LINK_TTL_S`
 * from now. Rounded to the day so that a job's link reads the same all day
 * (the API's `page_url`, `ctl job` and the commit status agree).
 */
function jobLinkExpiry(now = nowS()): number {
  return Math.ceil((now + JOB_LINK_TTL_S) / DAY_S) * DAY_S;
}

/** The `sig` of a job's link: its expiry and an HMAC over the job id and that expiry. */
export function signJobLink(keyring: Keyring, jobId: string, expiresS = jobLinkExpiry()) {
  const id = jobId.toLowerCase();
  return `${expiresS}.${mac(primary(keyring), 'job-link', `${id}\0${expiresS}`).toString('base64url')}`;
}

/** Whether `sig` opens the job's page now. */
export function verifyJobLink(keyring: Keyring, jobId: string, sig: string): boolean {
  const match = /^(\d{1,12})\.([A-Za-z0-9_-]{43})$/.exec(sig);
  if (!match) return false;
  const expires = Number(match[1]);
  if (expires < nowS()) return false;
  return verifies(keyring, 'job-link', `${jobId.toLowerCase()}\0${expires}`, match[2]!);
}

export interface Session {
  /** Random, per sign-in: what the CSRF token is bound to. */
  id: string;
  expiresS: number;
}

// A session is bound to the admin token too: a new admin token signs every
// session out.
const tokenTag = (adminToken: string) =>
  createHash('sha256').update(adminToken, 'utf8').digest('base64url');

/** A new session's cookie value. */
export function newSession(keyring: Keyring, adminToken: string): { value: string } & Session {
  const id = randomBytes(18).toString('base64url');
  const expiresS = nowS() + SESSION_TTL_S;
  const sig = mac(primary(keyring), 'session', `${id}\0${expiresS}\0${tokenTag(adminToken)}`);
  return { value: `${id}.${expiresS}.${sig.toString('base64url')}`, id, expiresS };
}

/** The session a cookie value stands for, or null when it is not one of ours or is over. */
export function readSession(
  keyring: Keyring,
  adminToken: string,
  value: string | undefined,
): Session | null {
  const match = value ? /^([A-Za-z0-9_-]{24})\.(\d{1,12})\.([A-Za-z0-9_-]{43})$/.exec(value) : null;
  if (!match) return null;
  const [, id, expires, sig] = match as unknown as [string, string, string, string];
  const expiresS = Number(expires);
  if (expiresS < nowS()) return null;
  const message = `${id}\0${expiresS}\0${tokenTag(adminToken)}`;
  return verifies(keyring, 'session', message, sig) ? { id, expiresS } : null;
}

/** The CSRF token of a session's forms. */
export function csrfToken(keyring: Keyring, session: Session): string {
  return mac(primary(keyring), 'csrf', session.id).toString('base64url');
}

/** Whether a form's CSRF token belongs to this session. */
export function verifyCsrf(keyring: Keyring, session: Session, token: string | undefined): boolean {
  return !!token && verifies(keyring, 'csrf', session.id, token);
}

/** True for a host on this machine, where a cookie cannot be `Secure` (plain http). */
export function isLoopbackHost(host: string | undefined): boolean {
  const name = (host ?? '').replace(/:\d+$/, '').toLowerCase();
  return name === 'localhost' || name === '[::1]' || /^127\.\d+\.\d+\.\d+$/.test(name);
}

/**
 * This site's origin, for every link that leaves a page and every callback:
 * CONDUCTOR_PUBLIC_URL when set (behind a proxy it is the only name that is
 * right), else the host the request came to, by the scheme it came by
 * (`x-forwarded-proto`: API Gateway sets it, and the local server passes it
 * on only from a trusted proxy), else plain http on this machine and https
 * anywhere else.
 */
export function siteOrigin(
  publicUrl: string | undefined,
  host: string | undefined,
  forwardedProto: string | undefined,
): string {
  if (publicUrl) return publicUrl.replace(/\/+$/, '');
  const name = host ?? 'localhost';
  const proto = forwardedProto?.split(',')[0]?.trim().toLowerCase();
  const scheme =
    proto === 'http' || proto === 'https' ? proto : isLoopbackHost(name) ? 'http' : 'https';
  return `${scheme}://${name}`;
}

/** Whether cookies are `Secure`: the site's origin (siteOrigin) is https. */
export function secureSite(
  publicUrl: string | undefined,
  host: string | undefined,
  forwardedProto: string | undefined,
): boolean {
  return siteOrigin(publicUrl, host, forwardedProto).startsWith('https:');
}

/** The Set-Cookie value of a session (or, with `value` null, of signing out); `secure` from secureSite. */
export function sessionCookie(value: string | null, secure: boolean): string {
  const flag = secure ? '; Secure' : '';
  const life = value === null ? '; Max-Age=0' : `; Max-Age=${SESSION_TTL_S}`;
  return `${SESSION_COOKIE}=${value ?? ''}; Path=/; HttpOnly; SameSite=Strict${flag}${life}`;
}

/**
 * A sign-in on its way through the forge, kept in the browser's cookie (not
 * in the database: starting a sign-in must not wake a paused one): its state,
 * PKCE verifier, where to go afterwards and when it started, under an HMAC.
 */
export interface SignInState {
  forge: string;
  state: string;
  verifier: string;
  next: string;
  /** On the people clock (lib/people/clock.ts), in ms. */
  startedMs: number;
}

/** The cookie value of a sign-in's state. */
export function sealSignIn(keyring: Keyring, s: SignInState): string {
  const body = Buffer.from(
    JSON.stringify([s.forge, s.state, s.verifier, s.next, s.startedMs]),
    'utf8',
  ).toString('base64url');
  return `${body}.${mac(primary(keyring), 'sign-in', body).toString('base64url')}`;
}

/** The sign-in a cookie value stands for, or null when it is not one this server sealed. */
export function openSignIn(keyring: Keyring, value: string | undefined): SignInState | null {
  const match = value ? /^([A-Za-z0-9_-]{1,3800})\.([A-Za-z0-9_-]{43})$/.exec(value) : null;
  if (!match || !verifies(keyring, 'sign-in', match[1]!, match[2]!)) return null;
  try {
    const [forge, state, verifier, next, startedMs] = JSON.parse(
      Buffer.from(match[1]!, 'base64url').toString('utf8'),
    ) as unknown[];
    if (
      typeof forge !== 'string' ||
      typeof state !== 'string' ||
      typeof verifier !== 'string' ||
      typeof next !== 'string' ||
      typeof startedMs !== 'number'
    ) {
      return null;
    }
    return { forge, state, verifier, next, startedMs };
  } catch {
    return null;
  }
}
