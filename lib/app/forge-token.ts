// The token the control plane calls a project's forge with: the project's
// own, or, for a project served by the GitHub App (issue #53), a token of the
// installation that has its repository, minted with the app's JWT
// (lib/forge/github/app.ts) and kept in this process under its expiry. Used
// for the pipeline file, compare, branch heads, permission questions, commit
// statuses and check runs; never handed to a runner, never logged.
import type { Config } from '../config.ts';
import type { Queryable } from '../db/index.ts';
import { ValidationError } from '../errors.ts';
import {
  APP_SETTINGS,
  type GitHubAppKeys,
  InstallationRefusedError,
  loadPrivateKey,
  mintInstallationToken,
  TokenCache,
} from '../forge/github/app.ts';
import { github } from '../forge/github/index.ts';
import { log } from '../log.ts';
import type { Keyring } from '../secrets.ts';
import { forgeToken, type ProjectRow } from './projects.ts';

export type AppConfig = Pick<
  Config,
  | 'CONDUCTOR_GITHUB_API_URL'
  | 'CONDUCTOR_GITHUB_APP_ID'
  | 'CONDUCTOR_GITHUB_APP_PRIVATE_KEY_FILE'
  | 'CONDUCTOR_GITHUB_APP_WEBHOOK_SECRET'
>;

/** What finding a project's token takes: the configuration, the database, the keyring. */
export interface TokenDeps {
  config: AppConfig;
  pool: Queryable;
  keyring: Keyring;
}

// The key is read once per process and path: a Lambda container reads the
// file at its first app call, not at every one.
let loaded: { path: string; keys: GitHubAppKeys } | undefined;

/**
 * The app's keys when all three settings are given; null when none is. Some
 * but not all, or a key file that cannot be read, throws naming the setting.
 */
export function appKeys(config: AppConfig): GitHubAppKeys | null {
  const id = config.CONDUCTOR_GITHUB_APP_ID;
  const file = config.CONDUCTOR_GITHUB_APP_PRIVATE_KEY_FILE;
  const secret = config.CONDUCTOR_GITHUB_APP_WEBHOOK_SECRET;
  if (!id && !file && !secret) return null;
  const missing = [
    id ? null : APP_SETTINGS.appId,
    file ? null : APP_SETTINGS.privateKeyFile,
    secret ? null : APP_SETTINGS.webhookSecret,
  ].filter(Boolean);
  if (missing.length > 0) {
    throw new ValidationError([
      { path: '', message: `the GitHub App needs ${missing.join(' and ')} too` },
    ]);
  }
  const kept = loaded;
  if (kept?.path !== file || kept?.keys.appId !== id || kept?.keys.webhookSecret !== secret) {
    loaded = {
      path: file!,
      keys: { appId: id!, privateKey: loadPrivateKey(file!), webhookSecret: secret! },
    };
  }
  return (loaded as NonNullable<typeof loaded>).keys;
}

const tokens = new TokenCache();

/** Forgets an installation's token (it was deleted or suspended). */
export function forgetInstallationToken(installationId: number): void {
  tokens.forget(installationId);
}

/** The installation that serves `repo` (case-insensitively), unless it is suspended; null when none. */
export async function installationOfRepo(db: Queryable, repo: string): Promise<number | null> {
  const { rows } = await db.query<{ id: string }>(
    `select i.id from github_installation_repositories r
       join github_installations i on i.id = r.installation_id
      where r.repo_key = lower($1) and not i.suspended`,
    [repo],
  );
  return rows[0] ? Number(rows[0].id) : null;
}

/** An installation token, from this process's cache or minted; the token is never logged. */
export async function installationToken(
  config: AppConfig,
  installationId: number,
): Promise<string> {
  const keys = appKeys(config);
  if (!keys) throw new InstallationRefusedError('the GitHub App is not configured');
  const api = github.apiBase({ githubApiUrl: config.CONDUCTOR_GITHUB_API_URL, forgeUrl: null })!;
  return tokens.get(installationId, () => mintInstallationToken(api, keys, installationId));
}

/**
 * The token the control plane calls the forge with for a project: for one
 * served by the GitHub App, a token of the installation that has its
 * repository (the project's own token when the app cannot give one: not
 * installed there, suspended, or refused); otherwise the project's token. A
 * forge that does not answer the mint is a ForgeUnavailableError, which the
 * callers already retry.
 */
export async function projectToken(
  deps: TokenDeps,
  project: Pick<ProjectRow, 'id' | 'forge_token_enc' | 'repo' | 'github_app'>,
): Promise<string | null> {
  const own = () => forgeToken(deps.keyring, project);
  if (!project.github_app) return own();
  const installation = await installationOfRepo(deps.pool, project.repo);
  if (installation === null) return own();
  try {
    return await installationToken(deps.config, installation);
  } catch (err) {
    if (err instanceof InstallationRefusedError) {
      tokens.forget(installation);
      log('warn', 'the GitHub App could not have an installation token', {
        project_id: project.id,
        installation,
        err,
      });
      return own();
    }
    throw err;
  }
}
