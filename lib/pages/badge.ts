// Status badges (issue #29): `GET /projects/{id}/badge.svg?ref=` answers a
// shields.io-style SVG, "conductor | passing" (or failing, running, none),
// for the latest job of the ref. A public project's badge is anyone's; a
// private one's only with the signed badge URL its project page shows (an
// HMAC of the project id and the ref under the keyring: it never expires,
// opens that ref's badge alone, and rotating the keyring's primary key and
// dropping the old one revokes it). Issue #46: a signature of the project
// alone answered for every ref, `refs/pull/77/head` and hidden branches too.
import { createHmac, hkdfSync, timingSafeEqual } from 'node:crypto';
import type { Pool } from '../db/index.ts';
import type { Reply } from '../http/index.ts';
import type { Keyring } from '../secrets.ts';

export type BadgeState = 'passing' | 'failing' | 'running' | 'none';

const COLOURS: Readonly<Record<BadgeState, string>> = {
  passing: '#4c1',
  failing: '#e05d44',
  running: '#dfb317',
  none: '#9f9f9f',
};

/** How long a badge may be cached: a minute. */
export const BADGE_MAX_AGE_S = 60;

function badgeKey(key: Buffer): Buffer {
  // v2: the project and the ref (v1 signed the project alone, and no longer opens anything).
  return Buffer.from(hkdfSync('sha256', key, 'conductor pages', 'conductor badge v2', 32));
}

// The ref as the URL gives it ('' for none: the latest job of any branch);
// a NUL cannot be in a project id, so no two pairs sign alike.
function badgeMac(key: Buffer, projectId: string, ref: string | null): Buffer {
  return createHmac('sha256', badgeKey(key))
    .update(`${projectId}\0${ref ?? ''}`, 'utf8')
    .digest();
}

/** The `sig` of a project's badge URL for one ref (null: any branch's latest job). */
export function signBadge(keyring: Keyring, projectId: string, ref: string | null): string {
  const key = keyring.keys.get(keyring.primaryId);
  if (!key) throw new Error('the keyring has no primary key');
  return badgeMac(key, projectId, ref).toString('base64url');
}

/** Whether `sig` opens the project's badge for this ref (under any key of the keyring). */
export function verifyBadge(
  keyring: Keyring,
  projectId: string,
  ref: string | null,
  sig: string,
): boolean {
  const given = Buffer.from(sig, 'base64url');
  if (given.length !== 32 || given.toString('base64url') !== sig) return false;
  for (const key of keyring.keys.values()) {
    if (timingSafeEqual(badgeMac(key, projectId, ref), given)) return true;
  }
  return false;
}

/** The badge's path for a project and ref, signed when `sig` is given. */
export function badgePath(projectId: string, ref: string | null, sig: string | null): string {
  const query = new URLSearchParams();
  if (ref) query.set('ref', ref);
  if (sig) query.set('sig', sig);
  const q = query.toString();
  return `/projects/${encodeURIComponent(projectId)}/badge.svg${q ? `?${q}` : ''}`;
}

/**
 * What the latest job of the ref says (`main` is `refs/heads/main`; without
 * a ref, the latest job of any branch): a cancelled job is passed over (it
 * says nothing about the code), pending, blocked and running read `running`.
 */
export async function badgeState(
  pool: Pool,
  projectId: string,
  ref: string | null,
): Promise<BadgeState> {
  const full = ref === null ? null : ref.startsWith('refs/') ? ref : `refs/heads/${ref}`;
  // Newest first along jobs (project_id, number): the first match ends it.
  const { rows } = await pool.query<{ state: string }>(
    `select state from jobs
      where project_id = $1 and state <> 'cancelled'
        and (case when $2::text is null then ref like 'refs/heads/%' else ref = $2 end)
      order by number desc limit 1`,
    [projectId, full],
  );
  const state = rows[0]?.state;
  if (state === undefined) return 'none';
  if (state === 'success') return 'passing';
  if (state === 'failed') return 'failing';
  return 'running';
}

function escapeXml(text: string): string {
  return text.replace(/[&<>"']/g, (c) => `&#${c.charCodeAt(0)};`);
}

// Verdana 11px is about 6.5 px a character on average: shields.io measures
// exactly; a badge this size needs only to fit.
const width = (text: string) => Math.round(text.length * 6.5) + 10;

/** The SVG of a badge: a grey label and a coloured message, as shields.io draws them. */
export function renderBadge(state: BadgeState, label = 'conductor'): string {
  const lw = width(label);
  const mw = width(state);
  const w = lw + mw;
  const l = escapeXml(label);
  const m = escapeXml(state);
  return `<svg xmlns="http://www.w3.org/2000/svg" width="${w}" height="20" role="img" aria-label="${l}: ${m}"><title>${l}: ${m}</title><linearGradient id="s" x2="0" y2="100%"><stop offset="0" stop-color="#bbb" stop-opacity=".1"/><stop offset="1" stop-opacity=".1"/></linearGradient><clipPath id="r"><rect width="${w}" height="20" rx="3" fill="#fff"/></clipPath><g clip-path="url(#r)"><rect width="${lw}" height="20" fill="#555"/><rect x="${lw}" width="${mw}" height="20" fill="${COLOURS[state]}"/><rect width="${w}" height="20" fill="url(#s)"/></g><g fill="#fff" text-anchor="middle" font-family="Verdana,Geneva,DejaVu Sans,sans-serif" font-size="11"><text x="${lw / 2}" y="15" fill="#010101" fill-opacity=".3">${l}</text><text x="${lw / 2}" y="14">${l}</text><text x="${lw + mw / 2}" y="15" fill="#010101" fill-opacity=".3">${m}</text><text x="${lw + mw / 2}" y="14" data-badge-state="${m}">${m}</text></g></svg>`;
}

/**
 * The badge route's answer: the SVG with a minute's cache for a public
 * project or a valid `sig`; otherwise a 404 that does not say whether the
 * project exists.
 */
export async function badgeReply(
  pool: Pool,
  keyring: Keyring,
  projectId: string,
  query: { ref?: string; sig?: string },
): Promise<Reply> {
  const { rows } = await pool.query<{ visibility: string }>(
    // As lib/pages/lists.ts reads it (VISIBILITY_SQL).
    `select coalesce(to_jsonb(p) ->> 'visibility', 'private') as visibility
       from projects p where p.id = $1`,
    [projectId],
  );
  const visibility = rows[0]?.visibility;
  const allowed =
    visibility === 'public' ||
    (visibility !== undefined &&
      query.sig !== undefined &&
      verifyBadge(keyring, projectId, query.ref ?? null, query.sig));
  if (!allowed) {
    return {
      status: 404,
      text: 'no such badge (a private project needs the signed badge URL from its page)',
      headers: { 'cache-control': 'no-store' },
    };
  }
  const ref = query.ref && query.ref.length <= 1024 ? query.ref : null;
  const state = await badgeState(pool, projectId, ref);
  return {
    status: 200,
    text: renderBadge(state),
    headers: {
      'content-type': 'image/svg+xml; charset=utf-8',
      'cache-control': `${visibility === 'public' ? 'public' : 'private'}, max-age=${BADGE_MAX_AGE_S}`,
      'x-content-type-options': 'nosniff',
      'content-security-policy': "default-src 'none'; style-src 'unsafe-inline'",
    },
  };
}
