// What every forge's webhook reading shares: the zod checks that name a field's path, the
// description of a bad value, shas, bot accounts, the files a push lists, HMAC signatures.
// Payloads are the forge's format, not ours, so every object is loose: fields we do not read
// are ignored, and only a field an event needs is an error.
import { createHmac, timingSafeEqual } from 'node:crypto';
import type { ValidationIssue } from '../errors.ts';
import * as z from '../zod.ts';
import type { PushDiff, WebhookIntent } from './forge.ts';

type DistributiveOmit<T, K extends PropertyKey> = T extends unknown ? Omit<T, K> : never;
/** An intent before the repository is attached to it. */
export type Outcome = DistributiveOmit<WebhookIntent, 'repo'>;

// Every forge names the object a ref points at by its SHA-1, or SHA-256 in SHA-256 repositories.
export const COMMIT_SHA = /^(?:[0-9a-f]{40}|[0-9a-f]{64})$/;
export const ZERO_SHA = /^0+$/;

/** True for a full commit sha as the forges write it: 40 or 64 lower-case hex digits. */
export function isCommitSha(value: string): boolean {
  return COMMIT_SHA.test(value);
}

export const ShaSchema = z.string().check(
  z.regex(COMMIT_SHA, {
    error: (issue) =>
      `expected a commit sha (40 or 64 lower-case hex digits), got ${describe(issue.input)}`,
  }),
);
// PostgreSQL text cannot hold NUL, and refs and names never contain one.
export const NameSchema = z.string().check(
  z.minLength(1, 'must not be empty'),
  z.maxLength(1024, 'must be at most 1024 characters'),
  z.refine((v: string) => !v.includes('\u0000'), 'must not contain a NUL character'),
);
export const PullNumberSchema = z
  .number()
  .check(
    z.int(),
    z.positive('must be a positive whole number'),
    z.lte(2_147_483_647, 'must be at most 2147483647'),
  );

/** Most commits a payload's list is trusted to hold in full (GitHub's timeline cap; GitLab's too). */
export const PAYLOAD_COMMITS_CAP = 20;
/** Most files kept from a payload's lists; past it, the compare API is asked. */
export const PAYLOAD_FILES_CAP = 3000;

/**
 * A push's before, created and listed files, read leniently from its payload. `totalField` is
 * where the forge says how many commits the push had when its list may be cut short (Gitea's
 * `total_commits`, GitLab's `total_commits_count`).
 */
export function readPushDiffOf(payload: unknown, totalField: string | null): PushDiff {
  if (!isPlainObject(payload)) return { before: null, forced: false, created: false, files: null };
  const rawBefore = typeof payload.before === 'string' ? payload.before.toLowerCase() : null;
  const zero = rawBefore !== null && ZERO_SHA.test(rawBefore);
  const before = rawBefore !== null && !zero && COMMIT_SHA.test(rawBefore) ? rawBefore : null;
  const created = payload.created === true || zero;
  return {
    before,
    forced: payload.forced === true,
    created,
    files: payloadFiles(payload, totalField),
  };
}

function payloadFiles(
  payload: Record<string, unknown>,
  totalField: string | null,
): string[] | null {
  const commits = payload.commits;
  if (!Array.isArray(commits) || commits.length === 0) return null;
  if (commits.length >= PAYLOAD_COMMITS_CAP) return null;
  const total = totalField === null ? undefined : payload[totalField];
  if (typeof total === 'number' && total !== commits.length) return null;
  const files = new Set<string>();
  for (const commit of commits) {
    if (!isPlainObject(commit)) return null;
    for (const key of ['added', 'removed', 'modified']) {
      const list = commit[key];
      if (!Array.isArray(list)) return null;
      for (const file of list) {
        if (typeof file !== 'string' || file === '' || file.includes('\u0000')) return null;
        files.add(file);
      }
    }
    if (files.size > PAYLOAD_FILES_CAP) return null;
  }
  return [...files];
}

/** `name` when a branch could be called that, else undefined. */
export function branchName(name: unknown): string | undefined {
  if (typeof name !== 'string' || name.length === 0 || name.length > 255) return undefined;
  // What git refuses in a branch name, loosely: a control character, a space, ~^:?*[\ or `..`.
  const bad = [...name].some((c) => c <= ' ' || c === '\x7f') || /[~^:?*[\\]|\.\./.test(name);
  return bad ? undefined : name;
}

// Bot logins by convention: GitHub Apps are `<app>[bot]`; a machine account on Gitea (which marks
// no account as a bot in its payloads, and whose names cannot hold brackets) is by custom named
// `renovate-bot`, `ci_bot` and the like; GitLab's project and group access tokens act as
// `project_<id>_bot_<hex>` and `group_<id>_bot_<hex>`.
const BOT_LOGIN = /(?:\[bot\]|[-_.]bot)$|^(?:project|group)_\d+_bot(?:_[0-9a-f]+)?$/i;

/**
 * True for an account that acts for a program, not a person: one GitHub marks `type: "Bot"`, or
 * one whose login ends in `[bot]`, `-bot`, `_bot` or `.bot` (or is a GitLab token's bot user).
 * Read leniently: `login`, Gitea's and GitLab's `username`, or a GitHub pusher's `name`.
 */
export function isBotAccount(user: unknown): boolean {
  if (!isPlainObject(user)) return false;
  if (user.type === 'Bot') return true;
  const login = accountLogin(user);
  return login !== undefined && BOT_LOGIN.test(login);
}

// `name` only where nothing else names the account (GitHub's `pusher`): elsewhere it is a
// person's display name.
function accountLogin(user: Record<string, unknown>): string | undefined {
  return [user.login, user.username, user.name].find(
    (v): v is string => typeof v === 'string' && v !== '',
  );
}

/** The logins of the bot accounts among `users`, each once. */
export function botLogins(users: unknown[]): string[] {
  const found: string[] = [];
  for (const user of users) {
    if (!isBotAccount(user)) continue;
    const login = accountLogin(user as Record<string, unknown>) ?? 'an unnamed bot';
    // Shown in the job's trust_reason: keep it one short line.
    const shown = login.replace(/\p{Cc}/gu, '').slice(0, 100);
    if (!found.includes(shown)) found.push(shown);
  }
  return found;
}

/** Parses `value` with `schema`, adding each problem to `issues` with its dotted path. */
export function check<T>(
  schema: z.core.$ZodType<T>,
  value: unknown,
  issues: ValidationIssue[],
): T | undefined {
  const result = z.safeParse(schema, value, { error: issueMessage });
  if (result.success) return result.data;
  for (const issue of result.error.issues) {
    const path = issue.path.map(String).join('.');
    // Several schemas read the same envelope fields; report each problem once.
    if (!issues.some((known) => known.path === path && known.message === issue.message)) {
      issues.push({ path, message: issue.message });
    }
  }
  return undefined;
}

const EXPECTED: Readonly<Record<string, string>> = {
  string: 'a string',
  number: 'a number',
  int: 'a whole number',
  boolean: 'true or false',
  object: 'an object',
  array: 'a list',
};

function issueMessage(issue: z.core.$ZodRawIssue): string | undefined {
  if (issue.code !== 'invalid_type') return undefined;
  if (issue.input === undefined) return 'missing';
  return `expected ${EXPECTED[issue.expected] ?? issue.expected}, got ${describe(issue.input)}`;
}

/** Describes a JSON value for a message: `null`, `a list`, `an object`, `"text"`, `42`. */
export function describe(value: unknown): string {
  if (value === null) return 'null';
  if (value === undefined) return 'nothing';
  if (Array.isArray(value)) return 'a list';
  if (typeof value === 'string') {
    return JSON.stringify(value.length > 60 ? `${value.slice(0, 60)}…` : value);
  }
  if (typeof value === 'object') return 'an object';
  return String(value);
}

export function isPlainObject(value: unknown): value is Record<string, unknown> {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}

/** The HMAC-SHA256 of the raw body with the secret. */
export function hmac(rawBody: Buffer, secret: string): Buffer {
  return createHmac('sha256', secret).update(rawBody).digest();
}

/**
 * Constant-time check of a hex HMAC-SHA256 that `format` finds in the header (its first group).
 * With an empty key anyone can compute the HMAC, so it proves nothing.
 */
export function verifyHmac(
  rawBody: Buffer,
  secret: string,
  header: string | undefined,
  format: RegExp,
): boolean {
  if (header === undefined || secret === '') return false;
  const hex = format.exec(header.trim())?.[1];
  if (hex === undefined) return false;
  const given = Buffer.from(hex, 'hex');
  const expected = hmac(rawBody, secret);
  // The format fixes the length at 32 bytes; timingSafeEqual throws on unequal lengths.
  return given.length === expected.length && timingSafeEqual(given, expected);
}

/** A string field of an object, when it is one that can be pasted into a shell as it is. */
export function pastableUrl(value: unknown): string | undefined {
  return typeof value === 'string' && /^https?:\/\/[A-Za-z0-9._~:/@%+-]{1,300}$/.test(value)
    ? value
    : undefined;
}
