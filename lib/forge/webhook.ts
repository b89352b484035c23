import { createHmac, timingSafeEqual } from 'node:crypto';
import { z } from 'zod';
import { BadRequestError, ValidationError, type ValidationIssue } from '../errors.ts';

// Webhook dialects of GitHub and Gitea (Forgejo speaks Gitea's): headers, signatures and the few
// payload fields that decide what a delivery asks for. Payloads are the forge's format, not ours,
// so every object is loose: fields we do not read are ignored, and only a field an event needs is
// an error.

export type ForgeKind = 'github' | 'gitea';

interface HeaderNames {
  event: string;
  delivery: string;
  signature: string;
}

/** Header names each forge sends; the signature header is the one the contract verifies. */
export const WEBHOOK_HEADERS = {
  github: {
    event: 'X-GitHub-Event',
    delivery: 'X-GitHub-Delivery',
    signature: 'X-Hub-Signature-256',
  },
  gitea: {
    event: 'X-Gitea-Event',
    delivery: 'X-Gitea-Delivery',
    signature: 'X-Gitea-Signature',
  },
} as const satisfies Record<ForgeKind, HeaderNames>;

/**
 * Other names the same headers arrive under, read when the forge's own is absent: Forgejo sends
 * the Gitea dialect (same payloads, same hex HMAC-SHA256) under `X-Forgejo-*` names.
 */
export const WEBHOOK_HEADER_ALIASES = {
  github: [],
  gitea: [
    {
      event: 'X-Forgejo-Event',
      delivery: 'X-Forgejo-Delivery',
      signature: 'X-Forgejo-Signature',
    },
  ],
} as const satisfies Record<ForgeKind, readonly HeaderNames[]>;

// Forges send UUIDs (36 characters); the cap only keeps a junk header out of the database.
const MAX_DELIVERY_LENGTH = 200;

export interface WebhookHeaders {
  event: string;
  delivery: string;
  signature: string | undefined;
}

/**
 * Reads event, delivery id and signature headers (case-insensitive names; for Gitea, Forgejo's
 * names when Gitea's are absent); a missing event or delivery header is a BadRequestError naming
 * the header.
 */
export function readWebhookHeaders(
  forge: ForgeKind,
  headers: Record<string, string | undefined>,
): WebhookHeaders {
  const byName = new Map<string, string>();
  for (const [name, value] of Object.entries(headers)) {
    // An empty value counts as absent: Gitea sends an empty signature header when no secret is set.
    const trimmed = value?.trim();
    if (trimmed) byName.set(name.toLowerCase(), trimmed);
  }
  const dialects: readonly HeaderNames[] = [
    WEBHOOK_HEADERS[forge],
    ...WEBHOOK_HEADER_ALIASES[forge],
  ];
  // Per header, the forge's own name first, then the aliases.
  const read = (field: keyof HeaderNames) => {
    for (const names of dialects) {
      const value = byName.get(names[field].toLowerCase());
      if (value !== undefined) return { name: names[field], value };
    }
    return undefined;
  };
  const missing = (field: keyof HeaderNames) => {
    const [own, ...others] = dialects.map((names) => names[field]);
    const also = others.length > 0 ? ` (or ${others.join(', ')})` : '';
    return new BadRequestError(`missing ${own} header${also}`);
  };
  const event = read('event');
  if (event === undefined) throw missing('event');
  const delivery = read('delivery');
  if (delivery === undefined) throw missing('delivery');
  if (delivery.value.length > MAX_DELIVERY_LENGTH) {
    throw new BadRequestError(
      `${delivery.name} header is ${delivery.value.length} characters; at most ${MAX_DELIVERY_LENGTH} are allowed`,
    );
  }
  return { event: event.value, delivery: delivery.value, signature: read('signature')?.value };
}

export type WebhookIntent =
  | { kind: 'ignore'; repo: string; reason: string }
  | {
      kind: 'build';
      repo: string;
      trigger: 'push' | 'tag' | 'pull_request';
      ref: string;
      sha: string;
      baseRef: string | null;
      pullRequest: number | null;
      trusted: boolean;
      /**
       * Only on a Gitea pull request from the base repository (a branch, or an AGit
       * `refs/for/...` push, which anyone who can read the repository may make): the logins
       * whose write access the forge must confirm before the job is trusted (`trusted` is
       * false until then). Empty when the payload names nobody.
       */
      confirmWriters?: string[];
      /**
       * Bot accounts behind the code (see isBotAccount): the sender or author of a pull request,
       * or the sender of a push to a branch other than the repository's default branch. Absent
       * when there is none. Whether they are trusted is the project's `bot_pull_requests`.
       */
      bots?: string[];
    }
  | { kind: 'close_pull_request'; repo: string; pullRequest: number };

/** What a push says of its own diff, read leniently: a field missing or odd is left unknown. */
export interface PushDiff {
  /** The commit before the push; null when the payload does not say or the branch is new. */
  before: string | null;
  /** GitHub's `forced`; Gitea does not say, so a Gitea force push is taken for a plain one. */
  forced: boolean;
  /** The push made the branch (`created`, or an all-zero `before`). */
  created: boolean;
  /**
   * The files the commits list (added, removed, modified), when that list is
   * complete; null when it may not be: a commit without its lists, more
   * commits than the payload holds (GitHub sends at most 20 in some
   * deliveries; Gitea says `total_commits`), or no commits at all.
   */
  files: string[] | null;
}

/** Most commits a payload's list is trusted to hold in full (GitHub's timeline cap). */
export const PAYLOAD_COMMITS_CAP = 20;
/** Most files kept from a payload's lists; past it, the compare API is asked. */
export const PAYLOAD_FILES_CAP = 3000;

type DistributiveOmit<T, K extends PropertyKey> = T extends unknown ? Omit<T, K> : never;
/** An intent before the repository is attached to it. */
type Outcome = DistributiveOmit<WebhookIntent, 'repo'>;

// Both forges name the object a ref points at by its SHA-1, or SHA-256 in SHA-256 repositories.
const COMMIT_SHA = /^(?:[0-9a-f]{40}|[0-9a-f]{64})$/;
const ZERO_SHA = /^0+$/;

/** True for a full commit sha as the forges write it: 40 or 64 lower-case hex digits. */
export function isCommitSha(value: string): boolean {
  return COMMIT_SHA.test(value);
}

const ShaSchema = z.string().regex(COMMIT_SHA, {
  error: (issue) =>
    `expected a commit sha (40 or 64 lower-case hex digits), got ${describe(issue.input)}`,
});
// PostgreSQL text cannot hold NUL, and refs and names never contain one.
const NameSchema = z
  .string()
  .min(1, 'must not be empty')
  .max(1024, 'must be at most 1024 characters')
  .refine((v) => !v.includes('\u0000'), 'must not contain a NUL character');
const RepoSchema = z.looseObject({ full_name: NameSchema });
const PullNumberSchema = z
  .number()
  .int()
  .positive('must be a positive whole number')
  .max(2_147_483_647, 'must be at most 2147483647');

const EnvelopeSchema = z.looseObject({ repository: RepoSchema });

// A push needs the ref, the new sha and the repository, nothing else. Both forges document more
// (`before`, `commits`, `pusher`, `sender`, `compare`/`compare_url`), and older Gitea and
// Gogs-compatible senders leave out `head_commit`, which GitHub sends as null for some pushes;
// none of them is read here except `head_commit` for tags, and then only when it is usable.
// Gitea's deprecated top-level `secret` is never read: only the signature header authenticates.
const PushSchema = z.looseObject({
  ref: NameSchema,
  after: ShaSchema,
  // GitHub only; an all-zero `after` marks a deleted ref on either forge.
  deleted: z.boolean().nullish(),
  head_commit: z.unknown().optional(),
});

const ActionSchema = z.looseObject({ action: NameSchema });

// What a pull request build needs: its number (top level, or inside `pull_request`), the head
// sha, the base ref, and the head and base repositories where the forge has them. GitHub and
// Gitea both write `head.repo: null` when the fork was deleted, which makes the job untrusted;
// a missing `base.repo` is the webhook's `repository`. Every other field (title, user, labels,
// `head.ref`, `merge_base`, `sender`, ...) may be absent or null.
const PullRequestBuildSchema = z.looseObject({
  number: PullNumberSchema.nullish(),
  pull_request: z.looseObject({
    number: PullNumberSchema.nullish(),
    head: z.looseObject({
      sha: ShaSchema,
      repo: RepoSchema.nullish(),
    }),
    base: z.looseObject({ ref: NameSchema, repo: RepoSchema.nullish() }),
  }),
});

// Closing needs only the number, so a closed delivery with a thin or null `pull_request` still
// cancels that pull request's jobs.
const PullRequestCloseSchema = z.looseObject({
  number: PullNumberSchema.nullish(),
  pull_request: z.looseObject({ number: PullNumberSchema.nullish() }).nullish(),
});

// GitHub spells it `synchronize`, Gitea `synchronized`; either is accepted from either forge.
const BUILD_ACTIONS = new Set(['opened', 'synchronize', 'synchronized', 'reopened']);

/**
 * Reads a parsed JSON payload leniently (unknown fields ignored). `repo` is
 * `repository.full_name`, required for every event because it is how the project is found. A
 * field the event needs that is missing or of the wrong type is a ValidationError whose issue
 * path names the field, e.g. `pull_request.head.sha`.
 */
export function parseWebhook(forge: ForgeKind, event: string, payload: unknown): WebhookIntent {
  // Both dialects carry these fields under the same names and meanings; the forge decides only
  // how far a pull request from the base repository is trusted.
  if (!isPlainObject(payload)) {
    throw new ValidationError([
      { path: '', message: `expected a JSON object, got ${describe(payload)}` },
    ]);
  }
  const issues: ValidationIssue[] = [];
  const envelope = check(EnvelopeSchema, payload, issues);
  const outcome = readEvent(forge, event, payload, envelope?.repository.full_name, issues);
  if (issues.length > 0 || envelope === undefined || outcome === undefined) {
    throw new ValidationError(issues);
  }
  return { ...outcome, repo: envelope.repository.full_name };
}

function readEvent(
  forge: ForgeKind,
  event: string,
  payload: Record<string, unknown>,
  repo: string | undefined,
  issues: ValidationIssue[],
): Outcome | undefined {
  switch (event) {
    case 'push':
      return readPush(payload, issues);
    case 'pull_request':
      return readPullRequest(forge, payload, repo, issues);
    case 'ping':
      return { kind: 'ignore', reason: 'ping' };
    case 'delete': {
      const ref = payload.ref;
      return {
        kind: 'ignore',
        reason: typeof ref === 'string' && ref !== '' ? `deleted ref ${ref}` : 'deleted ref',
      };
    }
    case 'create':
      // A new branch or tag also arrives as a push event, which is the one that builds.
      return { kind: 'ignore', reason: 'create event: the push event for the new ref builds it' };
    default:
      return { kind: 'ignore', reason: `event ${JSON.stringify(event)} triggers nothing` };
  }
}

function readPush(
  payload: Record<string, unknown>,
  issues: ValidationIssue[],
): Outcome | undefined {
  const push = check(PushSchema, payload, issues);
  if (push === undefined) return undefined;
  if (push.deleted === true || ZERO_SHA.test(push.after)) {
    return { kind: 'ignore', reason: `deleted ref ${push.ref}` };
  }
  let trigger: 'push' | 'tag';
  let sha = push.after;
  if (push.ref.startsWith('refs/heads/')) {
    trigger = 'push';
  } else if (push.ref.startsWith('refs/tags/')) {
    trigger = 'tag';
    // For an annotated tag `after` is the tag object, which neither forge's file API nor its
    // status API accepts as a commit; both name the tagged commit in `head_commit.id`
    // (GitHub since 2021, Gitea since 1.16). A lightweight tag has the same sha in both.
    sha = taggedCommit(push.head_commit) ?? push.after;
  } else {
    return { kind: 'ignore', reason: `push to ${push.ref} is neither a branch nor a tag` };
  }
  // A bot's branch is the head of the pull request it is about to open (Dependabot and Renovate
  // push the branch first), so it is held to the same rule. The default branch is not: what
  // lands there was merged by someone who may, and a release bot's tag is its own.
  const bots =
    trigger === 'push' && push.ref !== defaultBranchRef(payload)
      ? botLogins([payload.sender, payload.pusher])
      : [];
  return {
    kind: 'build',
    trigger,
    ref: push.ref,
    sha,
    baseRef: null,
    pullRequest: null,
    trusted: true,
    ...(bots.length > 0 ? { bots } : {}),
  };
}

/**
 * A push's before, forced, created and the files its commits list (see
 * PushDiff), for the `changes:` filters; read from the payload a push intent
 * came from. Never fails: what is missing is unknown.
 */
export function readPushDiff(payload: unknown): PushDiff {
  if (!isPlainObject(payload)) return { before: null, forced: false, created: false, files: null };
  const rawBefore = typeof payload.before === 'string' ? payload.before.toLowerCase() : null;
  const zero = rawBefore !== null && ZERO_SHA.test(rawBefore);
  const before = rawBefore !== null && !zero && COMMIT_SHA.test(rawBefore) ? rawBefore : null;
  const created = payload.created === true || zero;
  return { before, forced: payload.forced === true, created, files: payloadFiles(payload) };
}

function payloadFiles(payload: Record<string, unknown>): string[] | null {
  const commits = payload.commits;
  if (!Array.isArray(commits) || commits.length === 0) return null;
  if (commits.length >= PAYLOAD_COMMITS_CAP) return null;
  // Gitea caps the list (its feed setting) and says how many there were.
  const total = payload.total_commits;
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

/**
 * `repository.default_branch` of a push or pull request payload (GitHub's and
 * Gitea's), or undefined when it does not say or says something no branch
 * could be named.
 */
export function defaultBranchOf(payload: unknown): string | undefined {
  const repo = isPlainObject(payload) ? payload.repository : undefined;
  const name = isPlainObject(repo) ? repo.default_branch : undefined;
  if (typeof name !== 'string' || name.length === 0 || name.length > 255) return undefined;
  // What git refuses in a branch name, loosely: a control character, a space, ~^:?*[\ or `..`.
  const bad = [...name].some((c) => c <= ' ' || c === '\x7f') || /[~^:?*[\\]|\.\./.test(name);
  return bad ? undefined : name;
}

/** `refs/heads/<repository.default_branch>`, or undefined when the payload does not say. */
function defaultBranchRef(payload: Record<string, unknown>): string | undefined {
  const name = defaultBranchOf(payload);
  return name === undefined ? undefined : `refs/heads/${name}`;
}

// Bot logins by convention: GitHub Apps are `<app>[bot]`; a machine account on Gitea (which marks
// no account as a bot in its payloads, and whose names cannot hold brackets) is by custom named
// `renovate-bot`, `ci_bot` and the like.
const BOT_LOGIN = /(?:\[bot\]|[-_.]bot)$/i;

/**
 * True for an account that acts for a program, not a person: one GitHub marks `type: "Bot"`, or
 * one whose login ends in `[bot]`, `-bot`, `_bot` or `.bot`. Read leniently: `login`, Gitea's
 * `username`, or a GitHub pusher's `name`.
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
function botLogins(users: unknown[]): string[] {
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

function taggedCommit(headCommit: unknown): string | undefined {
  if (!isPlainObject(headCommit)) return undefined;
  const id = headCommit.id;
  return typeof id === 'string' && isCommitSha(id) ? id : undefined;
}

function readPullRequest(
  forge: ForgeKind,
  payload: Record<string, unknown>,
  repo: string | undefined,
  issues: ValidationIssue[],
): Outcome | undefined {
  const action = check(ActionSchema, payload, issues)?.action;
  if (action === undefined) return undefined;
  if (action === 'closed') {
    const closed = check(PullRequestCloseSchema, payload, issues);
    if (closed === undefined) return undefined;
    const number = pullNumber(closed.number, closed.pull_request?.number, issues);
    return number === undefined ? undefined : { kind: 'close_pull_request', pullRequest: number };
  }
  if (!BUILD_ACTIONS.has(action)) {
    return {
      kind: 'ignore',
      reason: `pull_request action ${JSON.stringify(action)} triggers nothing`,
    };
  }
  const body = check(PullRequestBuildSchema, payload, issues);
  if (body === undefined) return undefined;
  const pr = body.pull_request;
  const number = pullNumber(body.number, pr.number, issues);
  if (number === undefined) return undefined;
  // The pull request lives in the base repository, which is also the webhook's `repository`.
  const baseRepo = pr.base.repo?.full_name ?? repo;
  // Only a branch of the same repository is trusted with secrets: anyone can open a pull
  // request from a fork, and a deleted fork (head.repo null) is no better. Names compare
  // exactly; a case mismatch makes a job untrusted, which is the safe way to be wrong.
  const headRepo = pr.head.repo?.full_name;
  const sameRepo = headRepo !== undefined && headRepo === baseRepo;
  // Who opened or updated it, and whose it is: a person reopening or pushing to a bot's pull
  // request does not make the bot's code theirs.
  const bots = botLogins([
    payload.sender,
    isPlainObject(payload.pull_request) ? payload.pull_request.user : undefined,
  ]);
  const build = {
    kind: 'build',
    trigger: 'pull_request',
    ref: `refs/pull/${number}/head`,
    sha: pr.head.sha,
    baseRef: pr.base.ref,
    pullRequest: number,
    ...(bots.length > 0 ? { bots } : {}),
  } as const;
  // On GitHub only someone with write access can push a branch to the base repository. On
  // Gitea anyone who can read it can open a pull request from it by pushing to
  // `refs/for/<branch>` (the AGit flow), so the head repository proves nothing there: the job
  // starts untrusted, and the compile asks Gitea whether these people may write.
  if (forge === 'gitea' && sameRepo) {
    return { ...build, trusted: false, confirmWriters: giteaLogins(payload) };
  }
  return { ...build, trusted: sameRepo };
}

/**
 * Who a Gitea pull request event speaks for: its `sender` (who pushed, opened or reopened) and
 * the pull request's author (whose code it is, when someone else reopened it). Read leniently:
 * a missing or odd field only leaves its login out, and with nobody named the job stays
 * untrusted.
 */
function giteaLogins(payload: Record<string, unknown>): string[] {
  const pr = isPlainObject(payload.pull_request) ? payload.pull_request : {};
  const logins: string[] = [];
  for (const user of [payload.sender, pr.user]) {
    if (!isPlainObject(user)) continue;
    const login = [user.login, user.username].find(
      (v): v is string => typeof v === 'string' && LOGIN.test(v),
    );
    if (login && !logins.some((l) => l.toLowerCase() === login.toLowerCase())) logins.push(login);
  }
  return logins;
}

// Gitea user names: letters, digits, `-`, `_` and `.`; anything else is not asked about.
const LOGIN = /^[A-Za-z0-9_.-]{1,100}$/;

function pullNumber(
  top: number | null | undefined,
  nested: number | null | undefined,
  issues: ValidationIssue[],
): number | undefined {
  const number = top ?? nested ?? undefined;
  if (number === undefined) issues.push({ path: 'number', message: 'missing' });
  return number;
}

/** Parses `value` with `schema`, adding each problem to `issues` with its dotted path. */
function check<T>(schema: z.ZodType<T>, value: unknown, issues: ValidationIssue[]): T | undefined {
  const result = schema.safeParse(value, { error: issueMessage });
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

/**
 * Why a webhook body is not JSON, and what to change at the forge when its setting is the cause.
 * Both forges offer a second
 * content type, `application/x-www-form-urlencoded`, which sends the JSON as a `payload=` form
 * field; the signature would still check, so the only fix is the webhook's setting.
 */
export function notJsonMessage(
  forge: ForgeKind,
  headers: Record<string, string | undefined>,
  body: Buffer,
): string {
  const type = Object.entries(headers).find(([name]) => name.toLowerCase() === 'content-type')?.[1];
  const form =
    /^\s*application\/x-www-form-urlencoded/i.test(type ?? '') ||
    body.subarray(0, 8).toString('latin1') === 'payload=';
  const setting = forge === 'github' ? '"Content type"' : '"POST Content Type"';
  const fix = `set the webhook's ${setting} to application/json (the repository's Settings, Webhooks)`;
  if (form) return `the body is form-encoded (application/x-www-form-urlencoded), not JSON: ${fix}`;
  // Sent as JSON and still broken: the forge's setting is not the cause.
  if (type === undefined || /\bjson\b/i.test(type)) return 'the body is not valid JSON';
  return `the body is not valid JSON (content type ${JSON.stringify(type.slice(0, 100))}): ${fix}`;
}

/** Describes a JSON value for a message: `null`, `a list`, `an object`, `"text"`, `42`. */
function describe(value: unknown): string {
  if (value === null) return 'null';
  if (value === undefined) return 'nothing';
  if (Array.isArray(value)) return 'a list';
  if (typeof value === 'string') {
    return JSON.stringify(value.length > 60 ? `${value.slice(0, 60)}…` : value);
  }
  if (typeof value === 'object') return 'an object';
  return String(value);
}

function isPlainObject(value: unknown): value is Record<string, unknown> {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}

const SIGNATURE_FORMAT: Readonly<Record<ForgeKind, RegExp>> = {
  github: /^sha256=([0-9a-fA-F]{64})$/,
  gitea: /^([0-9a-fA-F]{64})$/,
};

function hmac(rawBody: Buffer, secret: string): Buffer {
  return createHmac('sha256', secret).update(rawBody).digest();
}

/** Constant-time check of the signature header over the raw body bytes with the project's secret. */
export function verifySignature(
  forge: ForgeKind,
  rawBody: Buffer,
  secret: string,
  header: string | undefined,
): boolean {
  // With an empty key anyone can compute the HMAC, so it proves nothing.
  if (header === undefined || secret === '') return false;
  const hex = SIGNATURE_FORMAT[forge].exec(header.trim())?.[1];
  if (hex === undefined) return false;
  const given = Buffer.from(hex, 'hex');
  const expected = hmac(rawBody, secret);
  // The format check fixes the length at 32 bytes; timingSafeEqual throws on unequal lengths.
  return given.length === expected.length && timingSafeEqual(given, expected);
}

/** Computes the header value a forge would send (for tests, the demo and the CLI). */
export function signBody(forge: ForgeKind, rawBody: Buffer, secret: string): string {
  const hex = hmac(rawBody, secret).toString('hex');
  return forge === 'github' ? `sha256=${hex}` : hex;
}
