// What a signed-in person may do (issue #31): the one decision, `may`. The
// admin token may do everything. A person signed in with a forge may do what
// that forge says of them on the project's repository, asked with the
// project's own forge token and kept for at most five minutes: read → view;
// write → rerun, cancel, approve, unblock, run with inputs; admin → settings,
// secrets, schedules, workers' scope. A project without a forge token cannot
// ask, so the answer is "ask an admin", never a guess.
import { type AppContext, readSecret } from '../context.ts';
import { ForbiddenError, NotFoundError, UnavailableError } from '../errors.ts';
import type { Forge, ForgeKind } from '../forge/forge.ts';
import { ForgeUnavailableError } from '../forge/index.ts';
import { askRepoPermission, type RepoPermission } from '../forge/permission.ts';
import { forgeName, forgeOf } from '../forge/registry.ts';
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
import {
  ADMIN_BEARER,
  endSessionById,
  listSessions,
  type Person,
  type SessionView,
} from '../people/sessions.ts';
import { FORGES } from '../states.ts';
import { auditInstallation } from './audit.ts';
import { projectToken } from './forge-token.ts';
import { getProjectRow } from './projects.ts';

export { ADMIN_BEARER, actorName } from '../people/sessions.ts';
export type { Action, Decision, Person };

const sameUrl = (a: string | null | undefined, b: string | null | undefined) =>
  !!a && !!b && a.replace(/\/+$/, '').toLowerCase() === b.replace(/\/+$/, '').toLowerCase();

/**
 * May this person take this action on this project? The admin token: yes.
 * A forge person: what the forge says (cached ≤ 5 minutes). A person who may
 * not even view a private project is answered exactly as for a project that
 * does not exist (404, no repository, no forge URL), so nobody learns which
 * private projects there are; a refused action on a project they may view
 * names why (403); a forge that does not answer in time says so (503).
 */
export async function may(
  ctx: AppContext,
  person: Person,
  projectId: string,
  action: Action,
): Promise<Decision> {
  if (person.kind === 'admin') return { allowed: true };
  const missing: Decision = {
    allowed: false,
    status: 404,
    reason: `project ${projectId} does not exist`,
  };
  const project = await getProjectRow(ctx.pool, projectId);
  if (!project) return missing;
  if (action === 'view' && project.visibility === 'public') return { allowed: true };
  const decision = await decide(ctx, person, project, action);
  if (decision.allowed || decision.status !== 403 || project.visibility === 'public') {
    return decision;
  }
  // Refused: may they view it at all? Only a known permission that lets them read says yes.
  if (action !== 'view' && 'viewable' in decision && decision.viewable) {
    return { allowed: false, status: 403, reason: decision.reason };
  }
  return missing;
}

type Inner = Decision | { allowed: false; status: 403; reason: string; viewable: boolean };

async function decide(
  ctx: AppContext,
  person: Person & { kind: 'forge' },
  project: NonNullable<Awaited<ReturnType<typeof getProjectRow>>>,
  action: Action,
): Promise<Inner> {
  const who = `@${person.login}`;
  const name = forgeName(person.forge);
  if (project.forge !== person.forge) {
    return {
      allowed: false,
      status: 403,
      reason: `You signed in with ${name}, and ${project.id} lives on ${forgeName(project.forge)}: sign in there, or ask an admin.`,
    };
  }
  // A forge that lives at a URL of its own (Gitea, GitLab) may be one of many:
  // the person signed in at one, and the project must live there too.
  if (hostedAnywhere(forgeOf(person.forge))) {
    const signedInAt = (await settings(ctx, forgeOf(person.forge))).url;
    if (!sameUrl(project.forge_url, signedInAt)) {
      return {
        allowed: false,
        status: 403,
        reason: `You signed in with the ${name} at ${signedInAt}, and ${project.id} lives on another (${project.forge_url ?? 'none given'}): ask an admin.`,
      };
    }
  }
  let token: string | null;
  try {
    // A project served by the GitHub App asks with its installation's token.
    token = await projectToken(ctx, project);
  } catch (err) {
    if (err instanceof ForgeUnavailableError) {
      log('warn', 'the forge did not answer a permission question', { err });
      return { allowed: false, status: 503, reason: `${name} did not answer; try again.` };
    }
    throw err;
  }
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
    const api = forgeOf(person.forge).apiBase({
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
  const viewable = permits(permission, 'view');
  const has =
    permission === 'none'
      ? `no access to ${project.repo}`
      : `${permission} access to ${project.repo}`;
  return {
    allowed: false,
    status: 403,
    reason: `${name} says ${who} has ${has}; ${ACTION_WORDS[action]} needs ${ACTION_NEEDS[action]} access.`,
    viewable,
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
  if (decision.status === 404) throw new NotFoundError(decision.reason);
  throw new ForbiddenError(decision.reason);
}

/** A forge whose projects each name where it lives (forge_url), rather than one API base for all. */
function hostedAnywhere(forge: Forge): boolean {
  return forge.forgeUrl.required || forge.forgeUrl.default !== undefined;
}

// Deployed, the sign-in settings may be fields of the app secret (Secrets
// Manager: each forge's Forge.oauth.store, e.g. github_client_id,
// github_client_secret, github_oauth_url, gitea_url, gitlab_client_id), read
// once per container; an environment variable of the same setting wins.
let appSecret: Promise<Record<string, unknown>> | undefined;
async function fromStore(ctx: AppContext): Promise<Record<string, string>> {
  const arn = ctx.config.CONDUCTOR_APP_SECRET_ARN;
  if (!arn) return {};
  appSecret ??= (readSecret(arn) as Promise<Record<string, unknown>>).catch((err) => {
    appSecret = undefined;
    throw err;
  });
  const all = await appSecret;
  const known = new Set(
    FORGES.flatMap((f) => [...Object.values(forgeOf(f).oauth.store), tokenField(f)]),
  );
  return Object.fromEntries(
    Object.entries(all).filter(
      (e): e is [string, string] => known.has(e[0]) && typeof e[1] === 'string' && e[1] !== '',
    ),
  );
}

interface SignInSettings {
  /** The OAuth base URL (GitHub's OAuth URL; Gitea's and GitLab's instance). */
  url?: string;
  clientId?: string;
  clientSecret?: string;
}

async function settings(ctx: AppContext, forge: Forge): Promise<SignInSettings> {
  const env = ctx.config as unknown as Record<string, string | undefined>;
  const { settings: names, store, defaultUrl } = forge.oauth;
  // The app secret is read only when the environment does not already say it all.
  const needStore = !(
    env[names.clientId] &&
    env[names.clientSecret] &&
    (env[names.url] || defaultUrl)
  );
  const s = needStore ? await fromStore(ctx) : {};
  return {
    url: env[names.url] ?? s[store.url] ?? defaultUrl,
    clientId: env[names.clientId] ?? s[store.clientId],
    clientSecret: env[names.clientSecret] ?? s[store.clientSecret],
  };
}

/**
 * Where the projects of a forge live for the people who sign in with it: the sign-in's
 * instance (Gitea's CONDUCTOR_GITEA_URL, GitLab's CONDUCTOR_GITLAB_URL or gitlab.com), without a
 * trailing slash; null for GitHub, whose API is CONDUCTOR_GITHUB_API_URL.
 */
export async function signInForgeUrl(ctx: AppContext, kind: ForgeKind): Promise<string | null> {
  const forge = forgeOf(kind);
  if (!hostedAnywhere(forge)) return null;
  return (await settings(ctx, forge)).url?.replace(/\/+$/, '') ?? null;
}

/** The app secret's field of a forge's token for adding projects (`gitea_token`). */
const tokenField = (kind: ForgeKind) => `${kind}_token`;

/**
 * Conductor's own token for a forge, for adding projects from the page (lib/app/onboarding.ts):
 * CONDUCTOR_<FORGE>_TOKEN, else, deployed, the app secret's `<forge>_token`; undefined when neither.
 */
export async function onboardingToken(
  ctx: AppContext,
  kind: ForgeKind,
): Promise<string | undefined> {
  const env = ctx.config as unknown as Record<string, string | undefined>;
  return env[`CONDUCTOR_${kind.toUpperCase()}_TOKEN`] ?? (await fromStore(ctx))[tokenField(kind)];
}

/** The forges one may sign in with: those whose client id and secret are set (and their URL). */
export async function signInForges(ctx: AppContext): Promise<ForgeKind[]> {
  const offered: ForgeKind[] = [];
  for (const kind of FORGES) {
    const s = await settings(ctx, forgeOf(kind));
    if (s.clientId && s.clientSecret && s.url) offered.push(kind);
  }
  return offered;
}

/** A forge's OAuth settings; null when it is not offered (an unknown forge, or one not configured). */
export async function oauthForge(ctx: AppContext, forge: string): Promise<OAuthForge | null> {
  if (!(FORGES as readonly string[]).includes(forge)) return null;
  const f = forgeOf(forge as ForgeKind);
  const { url, clientId, clientSecret } = await settings(ctx, f);
  if (!url || !clientId || !clientSecret) return null;
  const base = url.replace(/\/+$/, '');
  return {
    forge: f.kind,
    oauthUrl: base,
    // GitHub's API base is configuration of its own (GitHub Enterprise: /api/v3).
    apiUrl: hostedAnywhere(f) ? f.oauth.apiUrl(base) : ctx.config.CONDUCTOR_GITHUB_API_URL,
    clientId,
    clientSecret,
    timeoutMs: ctx.config.CONDUCTOR_SIGNIN_TIMEOUT_MS,
  };
}

/** The open sessions of the pages (`GET /v1/sessions`). */
export function openSessions(ctx: AppContext): Promise<SessionView[]> {
  return listSessions(ctx.pool);
}

/** Ends a session at once (`DELETE /v1/sessions/{id}`): its cookie opens nothing from now on. */
export async function revokeSession(
  ctx: AppContext,
  id: string,
  by: Person = ADMIN_BEARER,
): Promise<void> {
  if (!(await endSessionById(ctx.pool, id)))
    throw new NotFoundError(`session ${id} does not exist`);
  await auditInstallation(ctx.pool, by, { action: 'session.revoke', subject: id });
}

/** What the pages get handed (lib/people's PeopleGate). */
export const peopleGate: PeopleGate = { may, signInForges, oauthForge };
