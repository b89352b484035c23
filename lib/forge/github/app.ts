// The GitHub App's side of GitHub: the app's own JWT, installation tokens
// (exchanged for the JWT, cached under their expiry), check runs, and the
// webhook events only an app receives (installation, installation_repositories,
// check_run, check_suite). Which project an event is for, and what it does,
// is lib/app/github-app.ts.
//
// The JWT is signed with node:crypto rather than a library: Conductor only
// ever signs one fixed shape (RS256, three claims) with a key it loaded
// itself, and never parses or verifies a JWT it was handed, which is where
// JWT libraries earn their keep (algorithm confusion, claim checks). The
// signature is one crypto.sign call over base64url(header).base64url(claims).
import { createPrivateKey, type KeyObject, sign } from 'node:crypto';
import { readFileSync } from 'node:fs';
import * as z from '../../zod.ts';
import {
  callForge,
  type ForgeAnswer,
  ForgeRefusedError,
  ForgeTransportError,
  ForgeUnavailableError,
  forgeCall,
  transportErrorText,
} from '../client.ts';
import type { ForgeKind, ForgeRequest } from '../forge.ts';
import { pathOf } from '../forge.ts';
import { github } from './index.ts';

/** The forge the app serves (the rest of the code names no forge: test/architecture.test.ts). */
export const APP_FORGE: ForgeKind = 'github';

/** The app as configured: its id, its private key, and its webhook secret. */
export interface GitHubAppKeys {
  appId: string;
  privateKey: KeyObject;
  webhookSecret: string;
}

/** The settings' names (lib/config.ts), for messages. */
export const APP_SETTINGS = {
  appId: 'CONDUCTOR_GITHUB_APP_ID',
  privateKeyFile: 'CONDUCTOR_GITHUB_APP_PRIVATE_KEY_FILE',
  webhookSecret: 'CONDUCTOR_GITHUB_APP_WEBHOOK_SECRET',
} as const;

/** Raised when the app's settings are present but unusable (the key file unreadable, not a PEM). */
export class GitHubAppConfigError extends Error {
  constructor(message: string, options?: ErrorOptions) {
    super(message, options);
    this.name = 'GitHubAppConfigError';
  }
}

/** Reads the PEM private key file; the error names the setting, never the key. */
export function loadPrivateKey(path: string): KeyObject {
  let pem: string;
  try {
    pem = readFileSync(path, 'utf8');
  } catch (err) {
    throw new GitHubAppConfigError(
      `${APP_SETTINGS.privateKeyFile}: cannot read ${path} (${(err as NodeJS.ErrnoException).code ?? 'error'})`,
    );
  }
  try {
    const key = createPrivateKey(pem);
    if (key.asymmetricKeyType !== 'rsa') throw new Error('not RSA');
    return key;
  } catch {
    // GitHub hands out RSA keys in PEM (PKCS#1, "BEGIN RSA PRIVATE KEY").
    throw new GitHubAppConfigError(
      `${APP_SETTINGS.privateKeyFile}: ${path} is not an RSA private key in PEM (the .pem file GitHub generates for the app)`,
    );
  }
}

const b64url = (value: string | Buffer) => Buffer.from(value).toString('base64url');

/**
 * The app's JWT (RS256): issued 60 s in the past against clock drift, valid
 * for 9 minutes (GitHub refuses more than 10), `iss` the app's id.
 */
export function appJwt(keys: Pick<GitHubAppKeys, 'appId' | 'privateKey'>, nowMs = Date.now()) {
  const now = Math.floor(nowMs / 1000);
  const header = b64url(JSON.stringify({ alg: 'RS256', typ: 'JWT' }));
  const claims = b64url(JSON.stringify({ iat: now - 60, exp: now + 9 * 60, iss: keys.appId }));
  const signature = sign('sha256', Buffer.from(`${header}.${claims}`), keys.privateKey);
  return `${header}.${claims}.${b64url(signature)}`;
}

/** An installation token and when it stops working. */
export interface InstallationToken {
  token: string;
  expiresAt: Date;
}

const TokenAnswerSchema = z.looseObject({
  token: z.string().check(z.minLength(1), z.maxLength(2000)),
  expires_at: z.iso.datetime({ offset: true }),
});

/** Raised when GitHub refuses to hand out a token for an installation (uninstalled, suspended, a wrong key). */
export class InstallationRefusedError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'InstallationRefusedError';
  }
}

/**
 * Exchanges the app's JWT for a token of one installation
 * (`POST /app/installations/{id}/access_tokens`). A refusal is an
 * InstallationRefusedError; what may pass (the network, 5xx, rate limits) a
 * ForgeUnavailableError. The token is never put in a message.
 */
export async function mintInstallationToken(
  api: string,
  keys: Pick<GitHubAppKeys, 'appId' | 'privateKey'>,
  installationId: number,
  timeoutMs = 10_000,
): Promise<InstallationToken> {
  const url = `${api}/app/installations/${installationId}/access_tokens`;
  let res: ForgeAnswer;
  try {
    res = await callForge(
      forgeCall(github, appJwt(keys), { method: 'POST', url }, { timeoutMs, maxBytes: 64 * 1024 }),
    );
  } catch (err) {
    if (err instanceof ForgeRefusedError) throw new InstallationRefusedError(err.message);
    if (err instanceof ForgeTransportError) {
      throw new ForgeUnavailableError(
        `GitHub could not be reached (${transportErrorText(err, timeoutMs)}) for a token of installation ${installationId}`,
        { cause: err },
      );
    }
    throw err;
  }
  if (res.kind === 'rate_limited' || res.kind === 'retryable') {
    throw new ForgeUnavailableError(
      `GitHub answered HTTP ${res.status} for a token of installation ${installationId}`,
    );
  }
  if (res.kind !== 'ok') {
    throw new InstallationRefusedError(
      `GitHub refused a token of installation ${installationId} (HTTP ${res.status}): the app may be uninstalled or suspended there, or ${APP_SETTINGS.appId} and the private key may not match`,
    );
  }
  let parsed: z.infer<typeof TokenAnswerSchema>;
  try {
    parsed = TokenAnswerSchema.parse(JSON.parse(res.body?.toString('utf8') ?? ''));
  } catch {
    throw new InstallationRefusedError(
      `GitHub's answer for a token of installation ${installationId} has no token and expires_at`,
    );
  }
  return { token: parsed.token, expiresAt: new Date(parsed.expires_at) };
}

// A token is renewed this long before it expires, so no call starts with one
// about to lapse mid-request (GitHub's live for an hour).
export const TOKEN_RENEW_MARGIN_MS = 5 * 60_000;

/**
 * Installation tokens kept in this process under their expiry, one mint in
 * flight per installation. Each Lambda container keeps its own: GitHub lets
 * an app hold many tokens of one installation at once, so two containers
 * minting their own is harmless, and no token is ever written anywhere.
 */
export class TokenCache {
  private readonly tokens = new Map<number, InstallationToken>();
  private readonly minting = new Map<number, Promise<InstallationToken>>();

  constructor(private readonly now: () => number = Date.now) {}

  /** A token of the installation valid for at least the margin: the kept one, or a new one from `mint`. */
  async get(installationId: number, mint: () => Promise<InstallationToken>): Promise<string> {
    const kept = this.tokens.get(installationId);
    if (kept && kept.expiresAt.getTime() - this.now() > TOKEN_RENEW_MARGIN_MS) return kept.token;
    let pending = this.minting.get(installationId);
    if (!pending) {
      pending = mint().finally(() => this.minting.delete(installationId));
      this.minting.set(installationId, pending);
    }
    const fresh = await pending;
    this.tokens.set(installationId, fresh);
    return fresh.token;
  }

  /** Forgets an installation's token (it was uninstalled, or GitHub refused the token). */
  forget(installationId: number): void {
    this.tokens.delete(installationId);
  }
}

/** A check run's fields as Conductor sends them (POST and PATCH /repos/{o}/{r}/check-runs). */
export interface CheckRunBody {
  name: string;
  head_sha?: string;
  external_id?: string;
  details_url?: string;
  status: 'queued' | 'in_progress' | 'completed';
  conclusion?: 'success' | 'failure' | 'neutral' | 'cancelled' | 'timed_out' | 'action_required';
  started_at?: string;
  completed_at?: string;
  output: { title: string; summary: string; text?: string };
  actions?: { label: string; description: string; identifier: string }[];
}

/** The request that creates a check run. */
export function createCheckRun(api: string, repo: string, body: CheckRunBody): ForgeRequest {
  return { method: 'POST', url: `${api}/repos/${pathOf(repo)}/check-runs`, body };
}

/** The request that updates one. */
export function updateCheckRun(
  api: string,
  repo: string,
  id: number,
  body: CheckRunBody,
): ForgeRequest {
  return { method: 'PATCH', url: `${api}/repos/${pathOf(repo)}/check-runs/${id}`, body };
}

/** The check run's id in GitHub's answer. */
export function checkRunId(body: unknown): number | null {
  const id = (body as { id?: unknown } | null)?.id;
  return typeof id === 'number' && Number.isSafeInteger(id) && id > 0 ? id : null;
}

// The app's events, read leniently (GitHub adds fields).
const RepoRefSchema = z.looseObject({
  full_name: z.string().check(z.minLength(3), z.maxLength(300)),
});
const InstallationRefSchema = z.looseObject({
  id: z.number().check(z.int(), z.positive()),
  account: z.nullish(z.looseObject({ login: z.string().check(z.minLength(1), z.maxLength(200)) })),
});
const LoginSchema = z.looseObject({
  login: z.string().check(z.minLength(1), z.maxLength(200)),
});

/** What one of the app's deliveries says, before Conductor acts on it. */
export type AppEvent =
  | {
      kind: 'installation';
      action: 'created' | 'deleted' | 'suspend' | 'unsuspend' | 'other';
      installationId: number;
      account: string;
      repos: string[];
    }
  | {
      kind: 'installation_repositories';
      installationId: number;
      account: string;
      added: string[];
      removed: string[];
    }
  | {
      kind: 'rerun';
      installationId: number;
      repo: string;
      sender: string;
      /** check_run: the run's id and its external_id (the job); check_suite: the head commit. */
      checkRunId: number | null;
      externalId: string | null;
      headSha: string | null;
      why: string;
    }
  | { kind: 'repository'; installationId: number };

// At most this many repositories are read from one event: an installation on
// "all repositories" of a large organisation lists them in pages of its own.
export const MAX_EVENT_REPOS = 5_000;

const InstallationEventSchema = z.looseObject({
  action: z.string().check(z.maxLength(100)),
  installation: InstallationRefSchema,
  repositories: z.nullish(z.array(RepoRefSchema).check(z.maxLength(MAX_EVENT_REPOS))),
});
const InstallationReposEventSchema = z.looseObject({
  action: z.string().check(z.maxLength(100)),
  installation: InstallationRefSchema,
  repositories_added: z.nullish(z.array(RepoRefSchema).check(z.maxLength(MAX_EVENT_REPOS))),
  repositories_removed: z.nullish(z.array(RepoRefSchema).check(z.maxLength(MAX_EVENT_REPOS))),
});
const CheckRunEventSchema = z.looseObject({
  action: z.string().check(z.maxLength(100)),
  installation: InstallationRefSchema,
  repository: RepoRefSchema,
  sender: LoginSchema,
  check_run: z.looseObject({
    id: z.number().check(z.int(), z.positive()),
    external_id: z.nullish(z.string().check(z.maxLength(200))),
    head_sha: z.nullish(z.string().check(z.maxLength(100))),
  }),
  requested_action: z.nullish(z.looseObject({ identifier: z.string().check(z.maxLength(100)) })),
});
const CheckSuiteEventSchema = z.looseObject({
  action: z.string().check(z.maxLength(100)),
  installation: InstallationRefSchema,
  repository: RepoRefSchema,
  sender: LoginSchema,
  check_suite: z.looseObject({ head_sha: z.string().check(z.maxLength(100)) }),
});

/** The installation id a delivery carries, when it is the app's (only the app's deliveries have one). */
export function installationOf(payload: unknown): number | null {
  const installation = (payload as { installation?: unknown } | null)?.installation;
  const id = (installation as { id?: unknown } | null)?.id;
  return typeof id === 'number' && Number.isSafeInteger(id) && id > 0 ? id : null;
}

/** The identifier of the "Re-run" button Conductor puts on a finished check run. */
export const RERUN_ACTION = 'rerun';

/**
 * Reads one of the app's deliveries: the app's own events, or `repository`
 * for the rest (push, pull_request, ...), which the repository webhook's
 * dialect reads. Throws a zod error naming the field for a malformed one.
 */
export function parseAppEvent(event: string, payload: unknown): AppEvent {
  switch (event) {
    case 'installation': {
      const e = InstallationEventSchema.parse(payload);
      const known = ['created', 'deleted', 'suspend', 'unsuspend'] as const;
      const action = known.find((a) => a === e.action) ?? 'other';
      return {
        kind: 'installation',
        action,
        installationId: e.installation.id,
        account: e.installation.account?.login ?? '',
        repos: (e.repositories ?? []).map((r) => r.full_name),
      };
    }
    case 'installation_repositories': {
      const e = InstallationReposEventSchema.parse(payload);
      return {
        kind: 'installation_repositories',
        installationId: e.installation.id,
        account: e.installation.account?.login ?? '',
        added: (e.repositories_added ?? []).map((r) => r.full_name),
        removed: (e.repositories_removed ?? []).map((r) => r.full_name),
      };
    }
    case 'check_run': {
      const e = CheckRunEventSchema.parse(payload);
      const rerun =
        e.action === 'rerequested' ||
        (e.action === 'requested_action' && e.requested_action?.identifier === RERUN_ACTION);
      if (!rerun) return { kind: 'repository', installationId: e.installation.id };
      return {
        kind: 'rerun',
        installationId: e.installation.id,
        repo: e.repository.full_name,
        sender: e.sender.login,
        checkRunId: e.check_run.id,
        externalId: e.check_run.external_id || null,
        headSha: e.check_run.head_sha ?? null,
        why: `check_run ${e.action}`,
      };
    }
    case 'check_suite': {
      const e = CheckSuiteEventSchema.parse(payload);
      if (e.action !== 'rerequested')
        return { kind: 'repository', installationId: e.installation.id };
      return {
        kind: 'rerun',
        installationId: e.installation.id,
        repo: e.repository.full_name,
        sender: e.sender.login,
        checkRunId: null,
        externalId: null,
        headSha: e.check_suite.head_sha,
        why: 'check_suite rerequested',
      };
    }
    default:
      return { kind: 'repository', installationId: installationOf(payload) ?? 0 };
  }
}
