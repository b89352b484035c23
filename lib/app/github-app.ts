// The GitHub App's use cases (issue #53; GitHub's side is lib/forge/github/app.ts):
//
// - its deliveries at POST /v1/webhooks/github, told apart by their
//   `installation` field and verified with the app's webhook secret:
//   `installation` and `installation_repositories` keep the table of
//   installations and their repositories; pushes and pull requests of an
//   installed repository whose project is served by the app make jobs with no
//   per-project secret; `check_run` rerequested / requested_action and
//   `check_suite` rerequested rerun a job, for a sender whose permission
//   allows it as on the page, audited;
// - installation tokens for a project served by the app, in place of the
//   project's token (pipeline file, compare, branch heads, permission
//   questions, statuses), cached in this process under their expiry;
// - check runs, one per job, created and updated from the status outbox
//   (lib/app/statuses.ts) after the commit that wrote the row;
// - the repositories the app is installed on (installedRepositories), for
//   adding a project from the page.
import type { AppContext } from '../context.ts';
import { type Queryable, transaction } from '../db/index.ts';
import { ConflictError, NotFoundError, UnauthorizedError, ValidationError } from '../errors.ts';
import {
  APP_FORGE,
  APP_SETTINGS,
  type AppEvent,
  installationOf,
  parseAppEvent,
} from '../forge/github/app.ts';
import { github } from '../forge/github/index.ts';
import type { WebhookIntent } from '../forge/webhook.ts';
import { parseWebhook } from '../forge/webhook.ts';
import type { Reply } from '../http/index.ts';
import type { Person } from '../people/sessions.ts';
import { auditInstallation } from './audit.ts';
import {
  type AppConfig,
  appKeys,
  forgetInstallationToken,
  installationOfRepo,
  installationToken,
} from './forge-token.ts';
import { rerunFinishedJob } from './jobs.ts';
import { requireMay } from './people.ts';
import { findProjectByRepo, type ProjectRow } from './projects.ts';

/** One repository the app is installed on. */
export interface InstalledRepository {
  installation_id: number;
  /** The user or organisation it is installed on. */
  account: string;
  /** `owner/name`, as GitHub spells it. */
  repo: string;
  /** The project that serves it, if one does. */
  project_id: string | null;
}

/**
 * The repositories the app is installed on (suspended installations left
 * out), with the project that already serves each. With `login`, only those
 * GitHub says that person administers (asked with the installation's token,
 * one question per repository, at most `limit`): what "add a project from the
 * page" may offer them.
 */
export async function installedRepositories(
  ctx: Pick<AppContext, 'config' | 'pool'>,
  opts: { login?: string; limit?: number; timeoutMs?: number } = {},
): Promise<InstalledRepository[]> {
  const { rows } = await ctx.pool.query<InstalledRepository & { installation_id: string }>(
    `select r.installation_id, i.account, r.repo, p.id as project_id
       from github_installation_repositories r
       join github_installations i on i.id = r.installation_id
       left join projects p on p.forge = 'github' and lower(p.repo) = r.repo_key
      where not i.suspended
      order by r.repo_key
      limit $1`,
    [opts.limit ?? 500],
  );
  const all = rows.map((r) => ({ ...r, installation_id: Number(r.installation_id) }));
  if (opts.login === undefined) return all;
  const { askRepoPermission } = await import('../forge/permission.ts');
  const api = github.apiBase({
    githubApiUrl: ctx.config.CONDUCTOR_GITHUB_API_URL,
    forgeUrl: null,
  })!;
  const mine: InstalledRepository[] = [];
  for (const r of all) {
    const token = await installationToken(ctx.config, r.installation_id);
    const answer = await askRepoPermission({
      forge: APP_FORGE,
      api,
      repo: r.repo,
      login: opts.login,
      token,
      ...(opts.timeoutMs !== undefined ? { timeoutMs: opts.timeoutMs } : {}),
    });
    if (answer.kind === 'answer' && answer.permission === 'admin') mine.push(r);
  }
  return mine;
}

/** A delivery of the app's, once its headers and JSON are read. */
export interface AppDelivery {
  event: string;
  delivery: string;
  signature: string | undefined;
  payload: unknown;
  installationId: number;
}

/** The app's delivery in these headers and body, or null when it is a repository webhook's (no `installation`). */
export function asAppDelivery(read: {
  event: string;
  delivery: string;
  signature: string | undefined;
  payload: unknown;
}): AppDelivery | null {
  const installationId = installationOf(read.payload);
  return installationId === null ? null : { ...read, installationId };
}

/**
 * Checks an app delivery's signature with the app's secret: 404 when no app
 * is configured (the delivery names an installation this Conductor has no
 * app for), 401 when it does not verify.
 */
export function verifyAppDelivery(config: AppConfig, body: Buffer, d: AppDelivery): void {
  const keys = appKeys(config);
  if (!keys) {
    throw new NotFoundError(
      `a GitHub App delivery (installation ${d.installationId}), and no GitHub App is configured here: set ${APP_SETTINGS.appId}, ${APP_SETTINGS.privateKeyFile} and ${APP_SETTINGS.webhookSecret}`,
    );
  }
  if (!github.webhook.verify(body, keys.webhookSecret, d.signature)) {
    throw new UnauthorizedError(
      "the webhook signature is missing or wrong (the GitHub App's secret)",
    );
  }
}

/** What the app's delivery of a push or pull request goes on to (lib/app/webhook.ts). */
export type BuildDelivery = (project: ProjectRow, intent: WebhookIntent) => Promise<Reply>;

const appPerson = (login: string): Person => ({
  kind: 'forge',
  forge: APP_FORGE,
  login,
  sessionId: null,
});

function senderOf(payload: unknown): string {
  const login = (payload as { sender?: { login?: unknown } } | null)?.sender?.login;
  return typeof login === 'string' && login !== '' ? login.slice(0, 200) : 'github';
}

function readEvent(event: string, payload: unknown): AppEvent {
  try {
    return parseAppEvent(event, payload);
  } catch (err) {
    const issues = (err as { issues?: { path: PropertyKey[]; message: string }[] }).issues;
    if (!issues) throw err;
    throw new ValidationError(
      issues.map((i) => ({ path: i.path.map(String).join('.'), message: i.message })),
    );
  }
}

/**
 * One verified delivery of the app: an installation change, a rerun, or a
 * repository's event, which goes on to `build` when its repository is
 * installed and its project is served by the app, and is otherwise answered
 * 200 with why it was ignored (GitHub sends every installed repository's
 * events; a failure in its log would only be noise).
 */
export async function handleAppDelivery(
  ctx: AppContext,
  d: AppDelivery,
  build: BuildDelivery,
): Promise<Reply> {
  const e = readEvent(d.event, d.payload);
  const by = appPerson(senderOf(d.payload));
  switch (e.kind) {
    case 'installation':
      return installationChanged(ctx, e, by);
    case 'installation_repositories':
      return repositoriesChanged(ctx, e, by);
    case 'rerun':
      return rerunRequested(ctx, e, by);
    case 'repository':
      break;
  }
  // Events of the app that name no repository (github_app_authorization,
  // installation_target, ...) build nothing.
  const repository = (d.payload as { repository?: unknown } | null)?.repository;
  if (repository === undefined || repository === null) {
    return { status: 200, body: { ignored: `event ${JSON.stringify(d.event)} triggers nothing` } };
  }
  const intent = parseWebhook(APP_FORGE, d.event, d.payload);
  const installed = await installationOfRepo(ctx.pool, intent.repo);
  if (installed !== d.installationId) {
    return {
      status: 200,
      body: {
        ignored: `${intent.repo} is not among the repositories Conductor knows the app's installation ${d.installationId} to serve: add it to the installation on GitHub (its installation_repositories event tells Conductor)`,
      },
    };
  }
  const project = await findProjectByRepo(ctx.pool, APP_FORGE, intent.repo);
  if (!project) {
    return {
      status: 200,
      body: {
        ignored: `no project serves ${intent.repo}: add it from the page, or POST /v1/projects with "github_app": true`,
      },
    };
  }
  if (!project.github_app) {
    return {
      status: 200,
      body: {
        ignored: `project ${project.id} takes ${intent.repo}'s deliveries from its own webhook (github_app is off)`,
      },
    };
  }
  return build(project, intent);
}

async function upsertInstallation(db: Queryable, id: number, account: string): Promise<void> {
  await db.query(
    `insert into github_installations (id, account) values ($1, $2)
     on conflict (id) do update
       set account = case when excluded.account = '' then github_installations.account
                          else excluded.account end,
           updated_at = now()`,
    [id, account],
  );
}

async function addRepositories(db: Queryable, id: number, repos: string[]): Promise<void> {
  if (repos.length === 0) return;
  // A repository moves to this installation if it was another's (transferred).
  await db.query(
    `insert into github_installation_repositories (repo_key, repo, installation_id)
     select lower(r), r, $1 from unnest($2::text[]) r
     on conflict (repo_key) do update set repo = excluded.repo, installation_id = excluded.installation_id`,
    [id, [...new Set(repos)]],
  );
}

async function installationChanged(
  ctx: AppContext,
  e: Extract<AppEvent, { kind: 'installation' }>,
  by: Person,
): Promise<Reply> {
  const id = e.installationId;
  if (e.action === 'other') {
    return { status: 200, body: { ignored: 'this installation action changes nothing here' } };
  }
  await transaction(ctx.pool, async (tx) => {
    if (e.action === 'deleted') {
      await tx.query('delete from github_installations where id = $1', [id]);
      return;
    }
    await upsertInstallation(tx, id, e.account);
    if (e.action === 'created') {
      // The event lists every repository of a "selected" installation.
      await tx.query('delete from github_installation_repositories where installation_id = $1', [
        id,
      ]);
      await addRepositories(tx, id, e.repos);
    } else {
      await tx.query(
        'update github_installations set suspended = $2, updated_at = now() where id = $1',
        [id, e.action === 'suspend'],
      );
    }
  });
  forgetInstallationToken(id);
  const detail =
    e.action === 'created'
      ? `installation ${id} on ${e.account}: ${e.repos.length} repositories`
      : `installation ${id}${e.account ? ` on ${e.account}` : ''}`;
  await auditInstallation(ctx.pool, by, {
    action: `github_app.${e.action}`,
    subject: String(id),
    detail,
  });
  return {
    status: 200,
    body: {
      installation: id,
      action: e.action,
      ...(e.action === 'created' ? { repositories: e.repos.length } : {}),
    },
  };
}

async function repositoriesChanged(
  ctx: AppContext,
  e: Extract<AppEvent, { kind: 'installation_repositories' }>,
  by: Person,
): Promise<Reply> {
  const id = e.installationId;
  await transaction(ctx.pool, async (tx) => {
    await upsertInstallation(tx, id, e.account);
    await addRepositories(tx, id, e.added);
    if (e.removed.length > 0) {
      await tx.query(
        `delete from github_installation_repositories
          where installation_id = $1 and repo_key = any($2::text[])`,
        [id, e.removed.map((r) => r.toLowerCase())],
      );
    }
  });
  await auditInstallation(ctx.pool, by, {
    action: 'github_app.repositories',
    subject: String(id),
    detail: [
      e.added.length > 0 ? `added ${e.added.join(', ')}` : '',
      e.removed.length > 0 ? `removed ${e.removed.join(', ')}` : '',
    ]
      .filter(Boolean)
      .join('; ')
      .slice(0, 2000),
  });
  return {
    status: 200,
    body: { installation: id, added: e.added.length, removed: e.removed.length },
  };
}

const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;

/** The job a rerun event names: its check run's, or the newest finished one of the commit. */
async function jobToRerun(
  db: Queryable,
  projectId: string,
  e: Extract<AppEvent, { kind: 'rerun' }>,
): Promise<string | null> {
  if (e.checkRunId !== null) {
    // Conductor's own record of the run first; the run's external_id (the
    // job's id, which Conductor wrote) when the record is gone.
    const { rows } = await db.query<{ id: string }>(
      `select j.id from jobs j
        where j.project_id = $1
          and (j.id = (select c.job_id from github_check_runs c where c.check_run_id = $2)
               or ($3::text is not null and j.id::text = $3))
        limit 1`,
      [projectId, e.checkRunId, e.externalId && UUID.test(e.externalId) ? e.externalId : null],
    );
    return rows[0]?.id ?? null;
  }
  const { rows } = await db.query<{ id: string }>(
    `select id from jobs
      where project_id = $1 and sha = $2 and state in ('success', 'failed', 'cancelled')
      order by number desc limit 1`,
    [projectId, e.headSha],
  );
  return rows[0]?.id ?? null;
}

async function rerunRequested(
  ctx: AppContext,
  e: Extract<AppEvent, { kind: 'rerun' }>,
  by: Person,
): Promise<Reply> {
  const project = await findProjectByRepo(ctx.pool, APP_FORGE, e.repo);
  if (!project?.github_app || (await installationOfRepo(ctx.pool, e.repo)) !== e.installationId) {
    return {
      status: 200,
      body: {
        ignored: `no project served by the app's installation ${e.installationId} has ${e.repo}`,
      },
    };
  }
  const jobId = await jobToRerun(ctx.pool, project.id, e);
  if (!jobId) {
    return {
      status: 200,
      body: { ignored: `${e.why}: no finished job of ${project.id} is behind that check` },
    };
  }
  // As on the page: GitHub shows the button to anyone who can see the
  // pull request, so the sender's permission is asked (write reruns).
  await requireMay(ctx, by, project.id, 'rerun');
  let job: Awaited<ReturnType<typeof rerunFinishedJob>>;
  try {
    job = await rerunFinishedJob(ctx, jobId, false, by);
  } catch (err) {
    if (err instanceof ConflictError) return { status: 200, body: { ignored: err.message } };
    throw err;
  }
  return { status: 202, body: { job_id: job.id, number: job.number, rerun_of: jobId } };
}
