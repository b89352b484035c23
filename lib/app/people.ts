// What a signed-in person may do (issue #31): the one decision, `may`. The
// admin token may do everything. A person signed in with a forge may do what
// that forge says of them on the project's repository, asked with the
// project's own forge token and kept for at most five minutes: read → view;
// write → rerun, cancel, approve, unblock, run with inputs; admin → settings,
// secrets, schedules, workers' scope. A project without a forge token cannot
// ask, so the answer is "ask an admin", never a guess.
import { type AppContext, readSecret } from '../context.ts';
import { ForbiddenError, UnavailableError } from '../errors.ts';
import { apiBase, type ForgeKind, forgeName } from '../forge/client.ts';
import { ForgeUnavailableError } from '../forge/index.ts';
import { askRepoPermission, type RepoPermission } from '../forge/permission.ts';
import { log } from '../log.ts';
import type { Decision, OAuthForge, PeopleGate } from '../people/index.ts';
import {
  ACTION_NEEDS,
  ACTION_WORDS,
  type Action,
  cachedPermission,
  permits,
  rememberPermission,
} from '../people/permissions.ts';
import type { Person } from '../people/sessions.ts';
import { forgeToken, getProjectRow } from './projects.ts';

export { ADMIN_BEARER, actorName } from '../people/sessions.ts';
export type { Action, Decision, Person };

const sameUrl = (a: string | null | undefined, b: string | null | undefined) =>
  !!a && !!b && a.replace(/\/+$/, '').toLowerCase() === b.replace(/\/+$/, '').toLowerCase();

/**
 * May this person take this action on this project? The admin token: yes.
 * A forge person: what the forge says (cached ≤ 5 minutes); a refusal names
 * why (403), and a forge that does not answer in time says so (503).
 */
export async function may(
  ctx: AppContext,
  person: Person,
  projectId: string,
  action: Action,
): Promise<Decision> {
  if (person.kind === 'admin') return { allowed: true };
  const project = await getProjectRow(ctx.pool, projectId);
  if (!project)
    return { allowed: false, status: 403, reason: `project ${projectId} does not exist` };
  if (action === 'view' && project.visibility === 'public') return { allowed: true };
  const who = `@${person.login}`;
  const name = forgeName(person.forge);
  if (project.forge !== person.forge) {
    return {
      allowed: false,
      status: 403,
      reason: `You signed in with ${name}, and ${project.id} lives on ${forgeName(project.forge)}: sign in there, or ask an admin.`,
    };
  }
  if (person.forge === 'gitea' && !sameUrl(project.forge_url, ctx.config.CONDUCTOR_GITEA_URL)) {
    return {
      allowed: false,
      status: 403,
      reason: `You signed in with the Gitea at ${ctx.config.CONDUCTOR_GITEA_URL}, and ${project.id} lives on another (${project.forge_url ?? 'none given'}): ask an admin.`,
    };
  }
  const token = forgeToken(ctx.keyring, project);
  if (!token) {
    return {
      allowed: false,
      status: 403,
      reason: `${project.id} has no forge token, so Conductor cannot ask ${name} what ${who} may do: ask an admin.`,
    };
  }
  const key = {
    projectId: project.id,
    forge: person.forge,
    login: person.login,
    repo: project.repo,
  };
  let permission: RepoPermission | null = await cachedPermission(ctx.pool, key);
  if (permission === null) {
    const api = apiBase(person.forge, {
      githubApiUrl: ctx.config.CONDUCTOR_GITHUB_API_URL,
      forgeUrl: project.forge_url,
    });
    if (!api)
      return {
        allowed: false,
        status: 403,
        reason: `${project.id} has no forge URL: ask an admin.`,
      };
    try {
      const answer = await askRepoPermission({
        forge: person.forge,
        api,
        repo: project.repo,
        login: person.login,
        token,
        timeoutMs: ctx.config.CONDUCTOR_SIGNIN_TIMEOUT_MS,
      });
      if (answer.kind === 'refused') {
        return { allowed: false, status: 403, reason: `${answer.reason}: ask an admin.` };
      }
      permission = answer.permission;
    } catch (err) {
      if (err instanceof ForgeUnavailableError) {
        log('warn', 'the forge did not answer a permission question', { err });
        return { allowed: false, status: 503, reason: `${name} did not answer; try again.` };
      }
      throw err;
    }
    try {
      await rememberPermission(ctx.pool, key, permission);
    } catch (err) {
      // Only the cache is lost (the project was deleted meanwhile): the answer stands.
      log('warn', 'a permission answer could not be kept', { err });
    }
  }
  if (permits(permission, action)) return { allowed: true };
  const has =
    permission === 'none'
      ? `no access to ${project.repo}`
      : `${permission} access to ${project.repo}`;
  return {
    allowed: false,
    status: 403,
    reason: `${name} says ${who} has ${has}; ${ACTION_WORDS[action]} needs ${ACTION_NEEDS[action]} access.`,
  };
}

/** `may`, as an error: a ForbiddenError with the reason, or an UnavailableError when the forge did not answer. */
export async function requireMay(
  ctx: AppContext,
  person: Person,
  projectId: string,
  action: Action,
): Promise<void> {
  const decision = await may(ctx, person, projectId, action);
  if (decision.allowed) return;
  if (decision.status === 503) throw new UnavailableError(decision.reason, { retryAfterS: 5 });
  throw new ForbiddenError(decision.reason);
}

const FORGES: readonly ForgeKind[] = ['github', 'gitea'];

/** The forges one may sign in with: those whose client id is set (and, for Gitea, its URL). */
export function signInForges(ctx: AppContext): ForgeKind[] {
  const c = ctx.config;
  return FORGES.filter((f) =>
    f === 'github'
      ? !!c.CONDUCTOR_GITHUB_CLIENT_ID
      : !!c.CONDUCTOR_GITEA_CLIENT_ID && !!c.CONDUCTOR_GITEA_URL,
  );
}

// Deployed, the client secrets are fields of the app secret (Secrets
// Manager), read once per container when the first sign-in needs them.
let appSecret: Promise<Record<string, unknown>> | undefined;
async function secretFromStore(ctx: AppContext, field: string): Promise<string | undefined> {
  const arn = ctx.config.CONDUCTOR_APP_SECRET_ARN;
  if (!arn) return undefined;
  appSecret ??= (readSecret(arn) as Promise<Record<string, unknown>>).catch((err) => {
    appSecret = undefined;
    throw err;
  });
  const value = (await appSecret)[field];
  return typeof value === 'string' && value ? value : undefined;
}

/** A forge's OAuth settings, its client secret from the environment or the app secret; null when not offered. */
export async function oauthForge(ctx: AppContext, forge: string): Promise<OAuthForge | null> {
  const c = ctx.config;
  if (!(signInForges(ctx) as string[]).includes(forge)) return null;
  if (forge === 'github') {
    const secret =
      c.CONDUCTOR_GITHUB_CLIENT_SECRET ?? (await secretFromStore(ctx, 'github_client_secret'));
    if (!secret) return null;
    return {
      forge: 'github',
      oauthUrl: c.CONDUCTOR_GITHUB_OAUTH_URL,
      apiUrl: c.CONDUCTOR_GITHUB_API_URL,
      clientId: c.CONDUCTOR_GITHUB_CLIENT_ID!,
      clientSecret: secret,
      timeoutMs: c.CONDUCTOR_SIGNIN_TIMEOUT_MS,
    };
  }
  const secret =
    c.CONDUCTOR_GITEA_CLIENT_SECRET ?? (await secretFromStore(ctx, 'gitea_client_secret'));
  if (!secret) return null;
  const base = c.CONDUCTOR_GITEA_URL!.replace(/\/+$/, '');
  return {
    forge: 'gitea',
    oauthUrl: base,
    apiUrl: `${base}/api/v1`,
    clientId: c.CONDUCTOR_GITEA_CLIENT_ID!,
    clientSecret: secret,
    timeoutMs: c.CONDUCTOR_SIGNIN_TIMEOUT_MS,
  };
}

/** What the pages get handed (lib/people's PeopleGate). */
export const peopleGate: PeopleGate = { may, signInForges, oauthForge };
