// Adding a project from the page (issue #53): a signed-in person picks one of the repositories
// they administer, and the project is made with the forge's webhook. Conductor asks the forge
// with a token of its own per forge (CONDUCTOR_GITHUB_TOKEN, CONDUCTOR_GITEA_TOKEN,
// CONDUCTOR_GITLAB_TOKEN): the sign-in keeps no token of the person (docs/security.md), so the
// list is what that token administers, narrowed to what the forge says the person administers
// (asked with the same token, as every permission question is). The token becomes the new
// project's forge token; the webhook is made with a fresh secret after the project's row
// commits, never inside a transaction, and a project whose hook the forge refused is deleted
// again. Deleting a project deletes the hook Conductor made.
//
// The GitHub App (issue #53's other half): where the app is configured, its installations'
// repositories (`installedRepositories`, narrowed to those GitHub says the person administers,
// asked with the installation's token) are the GitHub list instead of the token's, the
// repository is read and the permission asked with the installation's token (`appSource`), and
// the project is made with `github_app: true`, no forge token and no hook: the app's own webhook
// serves it, so deleting it deletes no hook either.
import type { AppContext } from '../context.ts';
import { ConflictError, ForbiddenError, UnavailableError, ValidationError } from '../errors.ts';
import type { ForgeKind } from '../forge/forge.ts';
import { APP_FORGE, InstallationRefusedError } from '../forge/github/app.ts';
import { github } from '../forge/github/index.ts';
import { createHook, deleteHook } from '../forge/hooks.ts';
import { ForgeUnavailableError } from '../forge/index.ts';
import { askRepoPermission } from '../forge/permission.ts';
import { forgeName, forgeOf } from '../forge/registry.ts';
import { listRepositories, readRepository } from '../forge/repos.ts';
import { zodIssues } from '../http/index.ts';
import { log } from '../log.ts';
import type { Person } from '../people/sessions.ts';
import { FORGES, VISIBILITIES } from '../states.ts';
import * as z from '../zod.ts';
import { auditInstallation } from './audit.ts';
import { appKeys, installationOfRepo, installationToken } from './forge-token.ts';
import { installedRepositories } from './github-app.ts';
import { onboardingToken, signInForgeUrl } from './people.ts';
import {
  createProject,
  deleteProject,
  forgeToken,
  getProjectRow,
  ProjectCreateSchema,
  type ProjectView,
} from './projects.ts';

/** A repository offered on the page; `project` is the id of the project it already is, if any. */
export interface RepoChoice {
  repo: string;
  /** Null for a repository the GitHub App offers: its installation does not say. */
  private: boolean | null;
  project: string | null;
}

/** One forge's offer: its repositories, or why there are none (or fewer than there may be). */
export interface RepoOffer {
  forge: ForgeKind;
  title: string;
  repos: RepoChoice[];
  /** Said on the page: no token is configured, the forge refused or did not answer, the list stopped. */
  notice: string | null;
  /** The repositories the GitHub App is installed on: adding one makes no webhook. */
  app: boolean;
}

/** Whether `kind` is GitHub and the GitHub App is configured: then the app serves what is added. */
function viaApp(ctx: AppContext, kind: ForgeKind): boolean {
  return kind === APP_FORGE && appKeys(ctx.config) !== null;
}

/**
 * Where Conductor asks GitHub about `repo` when the app serves it: with a token of the
 * installation that has it. Missing when the app is not installed there.
 */
async function appSource(
  ctx: AppContext,
  repo: string,
): Promise<{ api: string; forgeUrl: null; token: string } | { missing: string }> {
  const installation = await installationOfRepo(ctx.pool, repo);
  if (installation === null) {
    return {
      missing: `The GitHub App is not installed on ${repo} (or its installation is suspended): install it on the repository at GitHub, then add it here.`,
    };
  }
  let token: string;
  try {
    token = await installationToken(ctx.config, installation);
  } catch (err) {
    if (!(err instanceof InstallationRefusedError)) throw err;
    return {
      missing: `GitHub refused the app a token of installation ${installation}: ${err.message}`,
    };
  }
  const api = github.apiBase({
    githubApiUrl: ctx.config.CONDUCTOR_GITHUB_API_URL,
    forgeUrl: null,
  })!;
  return { api, forgeUrl: null, token };
}

/** The repositories the app is installed on that `person` may add (all of them for the admin token). */
async function appOffer(ctx: AppContext, person: Person): Promise<RepoOffer> {
  const title = forgeOf(APP_FORGE).title;
  let installed: Awaited<ReturnType<typeof installedRepositories>>;
  try {
    installed = await installedRepositories(ctx, {
      ...(person.kind === 'forge' ? { login: person.login } : {}),
      limit: MAX_ASKED,
      timeoutMs: ctx.config.CONDUCTOR_SIGNIN_TIMEOUT_MS,
    });
  } catch (err) {
    if (err instanceof ForgeUnavailableError || err instanceof InstallationRefusedError) {
      log('warn', 'the GitHub App could not list the repositories a person administers', { err });
      return {
        forge: APP_FORGE,
        title,
        repos: [],
        notice: `${title} did not answer; try again.`,
        app: true,
      };
    }
    throw err;
  }
  return {
    forge: APP_FORGE,
    title,
    repos: installed.map((r) => ({ repo: r.repo, private: null, project: r.project_id })),
    notice: null,
    app: true,
  };
}

/** The variable that holds a forge's token for adding projects. */
const tokenSetting = (kind: ForgeKind) => `CONDUCTOR_${kind.toUpperCase()}_TOKEN`;

/** Where Conductor asks a forge, with which token; null when no token is configured for it. */
async function sourceFor(
  ctx: AppContext,
  kind: ForgeKind,
): Promise<{ api: string; forgeUrl: string | null; token: string } | { missing: string }> {
  const forge = forgeOf(kind);
  const token = await onboardingToken(ctx, kind);
  if (!token) {
    return {
      missing: `No ${forge.title} token is configured (${tokenSetting(kind)}, or ${kind}_token in the app secret), so Conductor cannot list ${forge.title} repositories: ask an admin.`,
    };
  }
  const forgeUrl = await signInForgeUrl(ctx, kind);
  const api = forge.apiBase({ githubApiUrl: ctx.config.CONDUCTOR_GITHUB_API_URL, forgeUrl });
  if (!api) {
    return { missing: `No ${forge.title} URL is configured: ask an admin.` };
  }
  return { api, forgeUrl, token };
}

/** How many permission questions one listing asks at once, and at most in all. */
const ASK_AT_ONCE = 8;
const MAX_ASKED = 100;

/**
 * The repositories `person` may add, by forge: those Conductor's token administers (it must, to
 * make the webhook) and, for a person signed in with a forge, that the forge says they
 * administer (asked for at most 100, 8 at a time, under one sign-in timeout). The admin token
 * sees every configured forge's list.
 */
export async function repositoriesFor(ctx: AppContext, person: Person): Promise<RepoOffer[]> {
  const kinds: readonly ForgeKind[] = person.kind === 'forge' ? [person.forge] : FORGES;
  const offers: RepoOffer[] = [];
  for (const kind of kinds) {
    const title = forgeOf(kind).title;
    if (viaApp(ctx, kind)) {
      offers.push(await appOffer(ctx, person));
      continue;
    }
    const source = await sourceFor(ctx, kind);
    if ('missing' in source) {
      // The admin is shown only the forges that are set up.
      if (person.kind === 'forge')
        offers.push({ forge: kind, title, repos: [], notice: source.missing, app: false });
      continue;
    }
    let listed: Awaited<ReturnType<typeof listRepositories>>;
    try {
      listed = await listRepositories({
        forge: kind,
        api: source.api,
        token: source.token,
        timeoutMs: ctx.config.CONDUCTOR_SIGNIN_TIMEOUT_MS,
      });
    } catch (err) {
      if (!(err instanceof ForgeUnavailableError)) throw err;
      log('warn', 'the forge did not answer a repository listing', { err });
      offers.push({
        forge: kind,
        title,
        repos: [],
        notice: `${title} did not answer; try again.`,
        app: false,
      });
      continue;
    }
    const { rows } = await ctx.pool.query<{ id: string; repo: string }>(
      'select id, lower(repo) as repo from projects where forge = $1',
      [kind],
    );
    const existing = new Map(rows.map((r) => [r.repo, r.id]));
    let repos = listed.repos
      .filter((r) => r.admin)
      .map((r) => ({
        repo: r.repo,
        private: r.private as boolean | null,
        project: existing.get(r.repo.toLowerCase()) ?? null,
      }));
    const notices: string[] = [];
    if (listed.reason) notices.push(`${title} stopped the list: ${listed.reason}.`);
    if (listed.truncated)
      notices.push(`Only the first ${listed.repos.length} repositories were read.`);
    if (person.kind === 'forge') {
      const asked = await adminsOf(ctx, person, kind, source, repos.slice(0, MAX_ASKED));
      if (asked.unanswered)
        notices.push(`${title} did not answer about some repositories; reload in a moment.`);
      if (repos.length > MAX_ASKED) notices.push(`Only the first ${MAX_ASKED} were asked about.`);
      repos = asked.admin;
    }
    offers.push({ forge: kind, title, repos, notice: notices.join(' ') || null, app: false });
  }
  return offers;
}

/** Those of `repos` the forge says `person` administers, asked under one deadline. */
async function adminsOf(
  ctx: AppContext,
  person: Person & { kind: 'forge' },
  kind: ForgeKind,
  source: { api: string; token: string },
  repos: RepoChoice[],
): Promise<{ admin: RepoChoice[]; unanswered: boolean }> {
  const answers: (boolean | null)[] = repos.map(() => null);
  let next = 0;
  let late = false;
  let timer: NodeJS.Timeout | undefined;
  const deadline = new Promise<void>((resolve) => {
    timer = setTimeout(resolve, ctx.config.CONDUCTOR_SIGNIN_TIMEOUT_MS + 50);
  });
  const asked = Promise.all(
    Array.from({ length: Math.min(ASK_AT_ONCE, repos.length) }, async () => {
      while (!late && next < repos.length) {
        const i = next++;
        try {
          const answer = await askRepoPermission({
            forge: kind,
            api: source.api,
            repo: repos[i]!.repo,
            login: person.login,
            token: source.token,
            timeoutMs: ctx.config.CONDUCTOR_SIGNIN_TIMEOUT_MS,
          });
          answers[i] = answer.kind === 'answer' && answer.permission === 'admin';
        } catch {
          // Left out, as unanswered: the page says so.
        }
      }
    }),
  );
  await Promise.race([asked, deadline]);
  late = true;
  clearTimeout(timer);
  return {
    admin: repos.filter((_, i) => answers[i] === true),
    unanswered: answers.some((a) => a === null),
  };
}

const PROJECT_ID = /^[a-z0-9][a-z0-9-]{0,62}$/;

/** The page's "Add" form. */
export const AddProjectSchema = z.strictObject({
  forge: z.enum(FORGES),
  repo: z.string().check(z.trim(), z.minLength(1), z.maxLength(1000)),
  id: z.pipe(
    z.pipe(
      z.optional(z.string().check(z.trim(), z.maxLength(63))),
      z.transform((v: string | undefined) => (v ? v : undefined)),
    ),
    z.optional(
      z
        .string()
        .check(
          z.regex(
            PROJECT_ID,
            'lower-case letters, digits and -, starting with a letter or digit, at most 63',
          ),
        ),
    ),
  ),
  visibility: z.optional(z.enum(VISIBILITIES)),
});
export type AddProject = z.infer<typeof AddProjectSchema>;

/** A project id from a repository's name: `Acme/Web_App` → `web-app`. */
export function projectIdFor(repo: string): string {
  const name = repo.split('/').pop() ?? repo;
  const id = name
    .toLowerCase()
    .replace(/[^a-z0-9-]+/g, '-')
    .replace(/^-+|-+$/g, '')
    .slice(0, 63)
    .replace(/-+$/, '');
  return id || 'project';
}

/**
 * Adds the repository as a project for `person`, who must administer it (the forge is asked
 * now, not from the cache), and makes its webhook at the forge with the project's fresh secret,
 * pointing at `origin`/v1/webhooks/<forge>. The webhook secret is never shown: the forge has it.
 * A hook the forge refuses deletes the project again and says why. On GitHub with the app, the
 * repository must be one the app is installed on, and the project is served by the app: no
 * hook, no token of its own (`hookId` null).
 */
export async function addProjectFromForge(
  ctx: AppContext,
  person: Person,
  input: AddProject,
  origin: string,
): Promise<{ project: ProjectView; hookId: string | null }> {
  const forge = forgeOf(input.forge);
  if (person.kind === 'forge' && person.forge !== input.forge) {
    throw new ForbiddenError(
      `You signed in with ${forgeName(person.forge)}: only ${forgeName(person.forge)} repositories can be added by you.`,
    );
  }
  if (!forge.isRepo(input.repo)) {
    throw new ValidationError([{ path: 'repo', message: `must be ${forge.repoShape}` }]);
  }
  const app = viaApp(ctx, input.forge);
  const timeoutMs = ctx.config.CONDUCTOR_SIGNIN_TIMEOUT_MS;
  const unavailable = (err: unknown) =>
    new UnavailableError(`${forge.title} did not answer; try again.`, {
      cause: err,
      retryAfterS: 5,
    });
  let source: Awaited<ReturnType<typeof sourceFor>>;
  try {
    source = app ? await appSource(ctx, input.repo) : await sourceFor(ctx, input.forge);
  } catch (err) {
    // The installation token's mint is a call to GitHub.
    if (err instanceof ForgeUnavailableError) throw unavailable(err);
    throw err;
  }
  if ('missing' in source) throw new ConflictError(source.missing);
  let described: Awaited<ReturnType<typeof readRepository>>;
  try {
    described = await readRepository({
      forge: input.forge,
      api: source.api,
      token: source.token,
      repo: input.repo,
      timeoutMs,
    });
    if (described.ok && person.kind === 'forge') {
      const answer = await askRepoPermission({
        forge: input.forge,
        api: source.api,
        repo: described.repo.repo,
        login: person.login,
        token: source.token,
        timeoutMs,
      });
      if (answer.kind === 'refused') throw new ForbiddenError(`${answer.reason}: ask an admin.`);
      if (answer.permission !== 'admin') {
        throw new ForbiddenError(
          `${forge.title} says @${person.login} has ${answer.permission === 'none' ? 'no' : answer.permission} access to ${described.repo.repo}; adding it as a project needs admin access.`,
        );
      }
    }
  } catch (err) {
    if (err instanceof ForgeUnavailableError) throw unavailable(err);
    throw err;
  }
  if (!described.ok) throw new ValidationError([{ path: 'repo', message: described.reason }]);
  const repo = described.repo;
  // An installation token's answer has no `permissions`: the app needs none to serve the repository.
  if (!app && !repo.admin) {
    throw new ConflictError(
      `Conductor's ${forge.title} token does not administer ${repo.repo}, so it cannot make the webhook: ask an admin.`,
    );
  }
  const parsed = ProjectCreateSchema.safeParse({
    id: input.id ?? projectIdFor(repo.repo),
    name: repo.repo,
    forge: input.forge,
    repo: repo.repo,
    repo_url: repo.cloneUrl,
    forge_url: source.forgeUrl,
    // A project the app serves calls GitHub with the installation's tokens, minted as needed.
    ...(app ? { github_app: true } : { forge_token: source.token }),
    visibility: input.visibility ?? (repo.private ? 'private' : 'public'),
  });
  if (!parsed.success) throw new ValidationError(zodIssues(parsed.error));
  const { project, webhook_secret } = await createProject(
    ctx.pool,
    ctx.keyring,
    parsed.data,
    person,
  );
  // The app's webhook delivers its events: no hook of its own to make (nor to delete).
  if (app) return { project, hookId: null };
  // A project made here has its own webhook (never the app's), so its secret is in the answer.
  if (!webhook_secret)
    throw new Error('a project without the GitHub App answers its webhook secret');
  const target = {
    forge: input.forge,
    repo: project.repo,
    forgeUrl: project.forge_url,
    githubApiUrl: ctx.config.CONDUCTOR_GITHUB_API_URL,
    token: source.token,
  };
  const url = `${origin.replace(/\/+$/, '')}/v1/webhooks/${input.forge}`;
  let made: Awaited<ReturnType<typeof createHook>>;
  try {
    made = await createHook(target, { url, secret: webhook_secret }, { timeoutMs });
  } catch (err) {
    await deleteProject(ctx.pool, project.id, person);
    if (err instanceof ForgeUnavailableError) throw unavailable(err);
    throw err;
  }
  if (!made.ok) {
    await deleteProject(ctx.pool, project.id, person);
    throw new ConflictError(
      `${forge.title} did not make the webhook (${made.reason}): nothing was added.`,
    );
  }
  await ctx.pool.query('update projects set forge_hook_id = $2 where id = $1', [
    project.id,
    made.id,
  ]);
  await auditInstallation(ctx.pool, person, {
    action: 'project.hook',
    subject: project.id,
    detail: `webhook ${made.id} made at ${forge.title} for ${project.repo}, to ${url}`,
  });
  return { project, hookId: made.id };
}

/**
 * Deletes a project (lib/app/projects.ts deleteProject), then the webhook Conductor made for it,
 * with the project's token, after the deletion committed. A hook the forge would not delete is
 * said in the answer and the installation's audit; the project is gone all the same.
 */
export async function removeProject(
  ctx: AppContext,
  id: string,
  by: Person,
): Promise<{ hook: 'none' | 'deleted' | { left: string } }> {
  const row = await getProjectRow(ctx.pool, id);
  const { rows } = await ctx.pool.query<{ forge_hook_id: string | null }>(
    'select forge_hook_id from projects where id = $1',
    [id],
  );
  await deleteProject(ctx.pool, id, by);
  const hookId = rows[0]?.forge_hook_id ?? null;
  const token = row ? forgeToken(ctx.keyring, row) : null;
  if (!row || !hookId) return { hook: 'none' };
  const title = forgeOf(row.forge).title;
  let why: string;
  if (!token) {
    why = 'the project had no forge token left';
  } else {
    try {
      const done = await deleteHook(
        {
          forge: row.forge,
          repo: row.repo,
          forgeUrl: row.forge_url,
          githubApiUrl: ctx.config.CONDUCTOR_GITHUB_API_URL,
          token,
        },
        hookId,
        { timeoutMs: ctx.config.CONDUCTOR_SIGNIN_TIMEOUT_MS },
      );
      if (done.ok) {
        await auditInstallation(ctx.pool, by, {
          action: 'project.hook',
          subject: id,
          detail: `webhook ${hookId} deleted at ${title} for ${row.repo}`,
        });
        return { hook: 'deleted' };
      }
      why = done.reason;
    } catch (err) {
      if (!(err instanceof ForgeUnavailableError)) throw err;
      why = err.message;
    }
  }
  const left = `webhook ${hookId} of ${row.repo} is left at ${title} (${why}): delete it there`;
  log('warn', 'a deleted project left its webhook', { project_id: id, reason: why });
  await auditInstallation(ctx.pool, by, { action: 'project.hook', subject: id, detail: left });
  return { hook: { left } };
}
