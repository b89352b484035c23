import { randomBytes } from 'node:crypto';
import {
  type Pool,
  type Queryable,
  SQLSTATE,
  sqlState,
  statement,
  transaction,
} from '../db/index.ts';
import { ConflictError, NotFoundError, ValidationError } from '../errors.ts';
import type { BranchSource } from '../forge/branch.ts';
import { APP_FORGE } from '../forge/github/app.ts';
import { isLocalRepo } from '../forge/pipeline-file.ts';
import { forgeOf } from '../forge/registry.ts';
import { type IdleGate, openGate } from '../idle/gate.ts';
import { MIN_SECRET_LENGTH } from '../masking.ts';
import { forgetPermissions } from '../people/permissions.ts';
import { ADMIN_BEARER, type Person } from '../people/sessions.ts';
import { decrypt, encrypt, type Keyring } from '../secrets.ts';
import {
  BOT_PULL_REQUEST_POLICIES,
  type BotPullRequestPolicy,
  FORGES,
  FORK_PULL_REQUEST_POLICIES,
  type Forge,
  type ForkPullRequestPolicy,
  VISIBILITIES,
  type Visibility,
} from '../states.ts';
import * as z from '../zod.ts';
import { audit, auditInstallation } from './audit.ts';

const PROJECT_ID = /^[a-z0-9][a-z0-9-]{0,62}$/;
// `owner/name`; GitLab's full path has subgroups between (`group/sub/name`),
// which the forge's module allows (Forge.isRepo).
const REPO = /^[A-Za-z0-9_.-]+(?:\/[A-Za-z0-9_.-]+){1,20}$/;
export const SECRET_NAME = /^[A-Za-z_][A-Za-z0-9_]*$/;

/**
 * What a URL must not carry: credentials (a token belongs in forge_token,
 * sealed, never in a URL that is stored and shown), and a query or fragment,
 * which would turn the paths the control plane appends into a query or cut
 * them off.
 */
function plainUrl(value: string, ctx: z.core.$RefinementCtx<string>): void {
  if (!/^[a-z][a-z0-9+.-]*:\/\//i.test(value)) return;
  let parsed: URL;
  try {
    parsed = new URL(value);
  } catch {
    ctx.addIssue({ code: 'custom', message: 'is not a valid URL' });
    return;
  }
  if (parsed.username || parsed.password) {
    ctx.addIssue({
      code: 'custom',
      message: 'must not carry a user name or password (give a token as forge_token)',
    });
  }
  if (value.includes('?')) ctx.addIssue({ code: 'custom', message: 'must not have a query (?)' });
  if (value.includes('#')) {
    ctx.addIssue({ code: 'custom', message: 'must not have a fragment (#)' });
  }
}

const url = z.string().check(
  z.trim(),
  z.minLength(1),
  z.maxLength(2000),
  z.refine(
    (v) => isLocalRepo(v) || /^https?:\/\//.test(v),
    'must be an http(s) URL, a file:// URL or an absolute path',
  ),
  z.superRefine(plainUrl),
);
const forgeUrl = z
  .string()
  .check(
    z.trim(),
    z.maxLength(2000),
    z.regex(/^https?:\/\/[^\s]+$/, 'must be an http(s) URL'),
    z.superRefine(plainUrl),
  );

/** Most `org:` groups one project may be in. */
export const MAX_ORG_GROUPS = 50;

/** `org_groups`: the names N of the `org:N` concurrency groups the project's pipelines may use. */
const OrgGroupsSchema = z.pipe(
  z
    .array(
      z.pipe(
        z.string().check(
          z.trim(),
          z.minLength(1, 'must not be empty'),
          z.maxLength(196, 'must be at most 196 characters (the group is org: and the name)'),
          z.regex(/^\P{Cc}*$/u, 'must be one line without control characters'),
          z.refine(
            (name) => !name.startsWith('org:'),
            'the name without org: (deploy, not org:deploy)',
          ),
        ),
        // Groups are case-insensitive: stored as compiled group names are.
        z.transform((name: string) => name.toLowerCase()),
      ),
    )
    .check(z.maxLength(MAX_ORG_GROUPS, `must list at most ${MAX_ORG_GROUPS} groups`)),
  z.transform((names: string[]) => [...new Set(names)].sort()),
);

export const ProjectCreateSchema = z
  .strictObject({
    id: z
      .string()
      .check(
        z.regex(
          PROJECT_ID,
          'lower-case letters, digits and -, starting with a letter or digit, at most 63',
        ),
      ),
    name: z.string().check(z.trim(), z.minLength(1), z.maxLength(200)),
    forge: z.enum(FORGES),
    repo: z
      .string()
      .check(z.maxLength(1000), z.regex(REPO, 'must be owner/name (on GitLab, group/sub/name)')),
    repo_url: url,
    forge_url: z.optional(z.nullable(forgeUrl)),
    forge_token: z.optional(z.nullable(z.string().check(z.minLength(1), z.maxLength(10_000)))),
    cancel_superseded: z.optional(z.boolean()),
    fork_pull_requests: z.optional(z.enum(FORK_PULL_REQUEST_POLICIES)),
    bot_pull_requests: z.optional(z.enum(BOT_PULL_REQUEST_POLICIES)),
    visibility: z.optional(z.enum(VISIBILITIES)),
    org_groups: z.optional(OrgGroupsSchema),
    /** Served by the GitHub App (lib/app/github-app.ts): no webhook secret, tokens from its installation. */
    github_app: z.optional(z.boolean()),
  })
  .check(
    z.superRefine((p, ctx) => {
      const forge = forgeOf(p.forge);
      if (!forge.isRepo(p.repo)) {
        ctx.addIssue({ code: 'custom', path: ['repo'], message: `must be ${forge.repoShape}` });
      }
      if (p.github_app && p.forge !== APP_FORGE) {
        ctx.addIssue({
          code: 'custom',
          path: ['github_app'],
          message: 'only a github project can be served by the GitHub App',
        });
      }
    }),
  );
export type ProjectCreate = z.infer<typeof ProjectCreateSchema>;

export const ProjectUpdateSchema = z.strictObject({
  name: z.optional(z.string().check(z.trim(), z.minLength(1), z.maxLength(200))),
  repo_url: z.optional(url),
  forge_url: z.optional(z.nullable(forgeUrl)),
  forge_token: z.optional(z.nullable(z.string().check(z.minLength(1), z.maxLength(10_000)))),
  enabled: z.optional(z.boolean()),
  cancel_superseded: z.optional(z.boolean()),
  fork_pull_requests: z.optional(z.enum(FORK_PULL_REQUEST_POLICIES)),
  bot_pull_requests: z.optional(z.enum(BOT_PULL_REQUEST_POLICIES)),
  visibility: z.optional(z.enum(VISIBILITIES)),
  org_groups: z.optional(OrgGroupsSchema),
});
export type ProjectUpdate = z.infer<typeof ProjectUpdateSchema>;

/** A project as the API shows it: never the webhook secret or the token. */
export interface ProjectView {
  id: string;
  name: string;
  forge: Forge;
  repo: string;
  repo_url: string;
  forge_url: string | null;
  enabled: boolean;
  cancel_superseded: boolean;
  /** What an untrusted job does: waits in `blocked` for approval, runs at once, or is not created. */
  fork_pull_requests: ForkPullRequestPolicy;
  /** Whether a bot's pull request (Dependabot, Renovate) from a branch of the repository is trusted. */
  bot_pull_requests: BotPullRequestPolicy;
  /** Stored for the job pages: `public` projects' pages are readable by anyone. */
  visibility: Visibility;
  /** The names N of the `org:N` concurrency groups its pipelines may use (issue #46). */
  org_groups: string[];
  has_forge_token: boolean;
  /** Served by the GitHub App: its deliveries, installation tokens and check runs (issue #53). */
  github_app: boolean;
  /**
   * The repository's default branch as the forge's webhooks last said it
   * (`repository.default_branch`); null until one has, and `main` is assumed.
   */
  default_branch: string | null;
  /** 'on', or 'off: <why>'. */
  commit_statuses: string;
  created_at: Date;
  updated_at: Date;
}

/** A project with its sealed credentials, for the code that needs them. */
export interface ProjectRow extends ProjectView {
  webhook_secret_enc: string;
  forge_token_enc: string | null;
}

// `commit_statuses` says once, in the view, why a project gets no statuses.
const VIEW = `id, name, forge, repo, repo_url, forge_url, enabled, cancel_superseded,
  fork_pull_requests, bot_pull_requests, visibility, org_groups, forge_token_enc is not null as has_forge_token,
  github_app, default_branch,
  case when repo_url ~ '^https?://' and github_app then 'on: check runs through the GitHub App'
       when forge_token_enc is null then 'off: the project has no forge token'
       when repo_url !~ '^https?://' then 'off: the repository is not on a forge (a local path)'
       else 'on' end as commit_statuses,
  created_at, updated_at`;

/** Where each sealed value of a project lives, bound into its ciphertext. */
export const sealContext = {
  webhookSecret: (projectId: string) => `project/${projectId}/webhook-secret`,
  forgeToken: (projectId: string) => `project/${projectId}/forge-token`,
  secret: (projectId: string, name: string) => `project/${projectId}/secret/${name}`,
};

/** Hex, so it never starts with "-": pasted as `--secret VALUE` or into a
 * forge's form, a leading dash was read as an option (base64url, 1 in 32). */
function newWebhookSecret(): string {
  return randomBytes(24).toString('hex');
}

function checkForgeUrl(forge: Forge, repoUrl: string, forgeUrlValue: string | null | undefined) {
  // Gitea's API lives wherever the instance is: without its URL the pipeline
  // file cannot be read (unless the repository is a local one).
  const { title, forgeUrl: needs } = forgeOf(forge);
  if (needs.required && !forgeUrlValue && !isLocalRepo(repoUrl)) {
    throw new ValidationError([
      {
        path: 'forge_url',
        message: `required for a ${title} project (the base URL of the ${title} instance)`,
      },
    ]);
  }
}

/**
 * Creates a project and answers its webhook secret, which is shown this once;
 * a project served by the GitHub App has none to show (the app's secret signs
 * its deliveries).
 */
export async function createProject(
  pool: Pool,
  keyring: Keyring,
  input: ProjectCreate,
  by: Person = ADMIN_BEARER,
): Promise<{ project: ProjectView; webhook_secret?: string }> {
  checkForgeUrl(input.forge, input.repo_url, input.forge_url);
  const secret = newWebhookSecret();
  try {
    const project = await transaction(pool, async (tx) => {
      const { rows } = await tx.query<ProjectView>(
        `insert into projects (id, name, forge, repo, repo_url, forge_url, webhook_secret_enc,
                               forge_token_enc, cancel_superseded, fork_pull_requests, visibility,
                               bot_pull_requests, org_groups, github_app)
         values ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14)
         returning ${VIEW}`,
        [
          input.id,
          input.name,
          input.forge,
          input.repo,
          input.repo_url,
          // GitLab's default is gitlab.com (Forge.forgeUrl.default).
          input.forge_url ?? forgeOf(input.forge).forgeUrl.default ?? null,
          encrypt(keyring, secret, sealContext.webhookSecret(input.id)),
          input.forge_token
            ? encrypt(keyring, input.forge_token, sealContext.forgeToken(input.id))
            : null,
          input.cancel_superseded ?? true,
          input.fork_pull_requests ?? 'approve',
          input.visibility ?? 'private',
          input.bot_pull_requests ?? 'untrusted',
          input.org_groups ?? [],
          input.github_app ?? false,
        ],
      );
      return rows[0]!;
    });
    await auditInstallation(pool, by, {
      action: 'project.create',
      subject: project.id,
      detail: `${project.forge} ${project.repo}${project.github_app ? ', served by the GitHub App' : ''}${project.org_groups.length > 0 ? `, org groups ${project.org_groups.join(', ')}` : ''}`,
    });
    // The app's project keeps a sealed secret no one is shown: the column
    // stays required, and no repository webhook can be set up with it.
    return project.github_app ? { project } : { project, webhook_secret: secret };
  } catch (err) {
    if (sqlState(err) === SQLSTATE.uniqueViolation) {
      const constraint = (err as { constraint?: string }).constraint;
      if (constraint === 'projects_forge_repo') {
        throw new ConflictError(`a ${input.forge} project for ${input.repo} exists already`);
      }
      throw new ConflictError(`project "${input.id}" exists already`);
    }
    throw err;
  }
}

/** Every project, by id. */
export async function listProjects(db: Queryable): Promise<ProjectView[]> {
  const { rows } = await db.query<ProjectView>(`select ${VIEW} from projects order by id`);
  return rows;
}

/** One project, or a 404. */
export async function getProject(db: Queryable, id: string): Promise<ProjectView> {
  const { rows } = await db.query<ProjectView>(`select ${VIEW} from projects where id = $1`, [id]);
  if (!rows[0]) throw new NotFoundError(`project "${id}" does not exist`);
  return rows[0];
}

/** The project with its sealed credentials, or undefined. */
export async function getProjectRow(db: Queryable, id: string): Promise<ProjectRow | undefined> {
  const { rows } = await db.query<ProjectRow>(
    `select ${VIEW}, webhook_secret_enc, forge_token_enc from projects where id = $1`,
    [id],
  );
  return rows[0];
}

/** The project a webhook is for: its forge and repository full name, case-insensitively. */
export async function findProjectByRepo(
  db: Queryable,
  forge: Forge,
  repo: string,
): Promise<ProjectRow | undefined> {
  const { rows } = await db.query<ProjectRow>(
    `select ${VIEW}, webhook_secret_enc, forge_token_enc from projects
      where forge = $1 and lower(repo) = lower($2)`,
    [forge, repo],
  );
  return rows[0];
}

/**
 * Keeps the default branch a verified webhook names, when it is new: one
 * statement that writes nothing when the project already has it. Deliveries
 * arriving together all see the old value and all write: at REPEATABLE READ
 * each later writer meets the first's commit (40001), and statement() runs
 * it again, when it finds the branch set and writes nothing.
 */
export async function rememberDefaultBranch(
  db: Pool,
  projectId: string,
  branch: string,
): Promise<void> {
  await statement(db, {
    text: `update projects set default_branch = $2
            where id = $1 and default_branch is distinct from $2`,
    values: [projectId, branch],
  });
}

/**
 * Changes the given fields of a project; a `forge_token` of null removes the
 * token, and so does a change of `forge_url` that does not give it again.
 * Enabling a disabled project opens the idle gate (`gate`), so its schedules
 * and work are seen at once rather than at the weekly backstop sweep.
 */
export async function updateProject(
  pool: Pool,
  keyring: Keyring,
  id: string,
  input: ProjectUpdate,
  by: Person = ADMIN_BEARER,
  gate?: IdleGate,
): Promise<ProjectView> {
  let enabledNow = false;
  const view = await transaction(pool, async (tx) => {
    const current = await getProjectRow(tx, id);
    if (!current) throw new NotFoundError(`project "${id}" does not exist`);
    const repoUrl = input.repo_url ?? current.repo_url;
    const forgeUrlValue = input.forge_url === undefined ? current.forge_url : input.forge_url;
    checkForgeUrl(current.forge, repoUrl, forgeUrlValue);
    // The token was given for the forge it was set with: a new forge_url
    // without the token again drops it, so it is never sent to another host.
    const bare = (u: string | null | undefined) => (u ?? '').replace(/\/+$/, '');
    const forgeMoved = bare(forgeUrlValue) !== bare(current.forge_url);
    const token =
      input.forge_token === undefined
        ? forgeMoved
          ? null
          : current.forge_token_enc
        : input.forge_token === null
          ? null
          : encrypt(keyring, input.forge_token, sealContext.forgeToken(id));
    enabledNow = input.enabled === true && !current.enabled;
    const { rows } = await tx.query<ProjectView>(
      `update projects
          set name = $2, repo_url = $3, forge_url = $4, forge_token_enc = $5, enabled = $6,
              cancel_superseded = $7, fork_pull_requests = $8, visibility = $9,
              bot_pull_requests = $10, org_groups = $11, updated_at = now()
        where id = $1
        returning ${VIEW}`,
      [
        id,
        input.name ?? current.name,
        repoUrl,
        forgeUrlValue,
        token,
        input.enabled ?? current.enabled,
        input.cancel_superseded ?? current.cancel_superseded,
        input.fork_pull_requests ?? current.fork_pull_requests,
        input.visibility ?? current.visibility,
        input.bot_pull_requests ?? current.bot_pull_requests,
        input.org_groups ?? current.org_groups,
      ],
    );
    return rows[0]!;
  });
  // A closed gate keeps the wake time of the work it last saw, which left
  // out this project's schedules: open it (as a schedule's create does).
  if (enabledNow) await openGate(gate);
  // What the forge said of people was asked with the old token or URL.
  if (input.forge_token !== undefined || input.forge_url !== undefined) {
    await forgetPermissions(pool, id);
  }
  // The names of the fields changed, never a value (a token among them).
  await audit(pool, by, {
    projectId: id,
    action: 'settings',
    detail: Object.keys(input).join(', '),
  });
  // The installation's audit too: org_groups reach other projects' jobs.
  await auditInstallation(pool, by, {
    action: 'project.update',
    subject: id,
    detail: [
      Object.keys(input).join(', '),
      ...(input.org_groups ? [`org groups: ${view.org_groups.join(', ') || 'none'}`] : []),
    ].join('; '),
  });
  return view;
}

/** Deletes a project with its jobs, logs and secrets (its audit rows go too; the installation's audit keeps the deletion). */
export async function deleteProject(
  pool: Pool,
  id: string,
  by: Person = ADMIN_BEARER,
): Promise<void> {
  const deleted = await transaction(pool, async (tx) => {
    const { rows } = await tx.query<{ forge: string; repo: string }>(
      'delete from projects where id = $1 returning forge, repo',
      [id],
    );
    return rows[0];
  });
  if (!deleted) throw new NotFoundError(`project "${id}" does not exist`);
  await auditInstallation(pool, by, {
    action: 'project.delete',
    subject: id,
    detail: `${deleted.forge} ${deleted.repo}`,
  });
}

/** Replaces the webhook secret; the old one stops working with this commit. */
export async function rotateWebhookSecret(
  pool: Pool,
  keyring: Keyring,
  id: string,
  by: Person = ADMIN_BEARER,
): Promise<string> {
  const secret = newWebhookSecret();
  const found = await transaction(pool, async (tx) => {
    const { rowCount } = await tx.query(
      'update projects set webhook_secret_enc = $2, updated_at = now() where id = $1',
      [id, encrypt(keyring, secret, sealContext.webhookSecret(id))],
    );
    return rowCount === 1;
  });
  if (!found) throw new NotFoundError(`project "${id}" does not exist`);
  await audit(pool, by, { projectId: id, action: 'settings', detail: 'webhook secret replaced' });
  return secret;
}

/** The project's webhook secret in plain text. */
export function webhookSecret(keyring: Keyring, project: ProjectRow): string {
  return decrypt(keyring, project.webhook_secret_enc, sealContext.webhookSecret(project.id));
}

/** The project's forge token in plain text, or null. */
export function forgeToken(
  keyring: Keyring,
  project: Pick<ProjectRow, 'id' | 'forge_token_enc'>,
): string | null {
  return project.forge_token_enc === null
    ? null
    : decrypt(keyring, project.forge_token_enc, sealContext.forgeToken(project.id));
}

/** Where a project's branches are read (lib/forge/branch.ts), with its token opened. */
export function branchSource(
  config: { CONDUCTOR_GITHUB_API_URL: string },
  keyring: Keyring,
  project: ProjectRow,
): BranchSource {
  return {
    forge: project.forge,
    repo: project.repo,
    repoUrl: project.repo_url,
    forgeUrl: project.forge_url,
    githubApiUrl: config.CONDUCTOR_GITHUB_API_URL,
    token: forgeToken(keyring, project),
  };
}

export const SecretPutSchema = z.strictObject({ value: z.string().check(z.maxLength(64 * 1024)) });

/**
 * Sets a secret of a project (created or replaced). Answers a warning when
 * the value is too short to be masked (lib/masking.ts): it is stored all the
 * same, since the project may need it, but it will show in logs as it is.
 */
export async function putSecret(
  pool: Pool,
  keyring: Keyring,
  projectId: string,
  name: string,
  value: string,
  by: Person = ADMIN_BEARER,
): Promise<{ warning: string | null }> {
  if (!SECRET_NAME.test(name) || name.length > 200) {
    throw new ValidationError([
      {
        path: 'name',
        message: 'secret names are letters, digits and _, not starting with a digit',
      },
    ]);
  }
  try {
    await transaction(pool, (tx) =>
      tx.query(
        `insert into project_secrets (project_id, name, value_enc) values ($1, $2, $3)
         on conflict (project_id, name) do update set value_enc = excluded.value_enc, updated_at = now()`,
        [projectId, name, encrypt(keyring, value, sealContext.secret(projectId, name))],
      ),
    );
  } catch (err) {
    if (sqlState(err) === SQLSTATE.foreignKeyViolation) {
      throw new NotFoundError(`project "${projectId}" does not exist`);
    }
    throw err;
  }
  await audit(pool, by, { projectId, action: 'secret', detail: `${name} set` });
  return {
    warning:
      [...value].length < MIN_SECRET_LENGTH
        ? `secret ${name} is shorter than ${MIN_SECRET_LENGTH} characters, so it is not masked in logs, errors or outputs`
        : null,
  };
}

/** Deletes a secret of a project. */
export async function deleteSecret(
  pool: Pool,
  projectId: string,
  name: string,
  by: Person = ADMIN_BEARER,
): Promise<void> {
  const deleted = await transaction(pool, async (tx) => {
    const { rowCount } = await tx.query(
      'delete from project_secrets where project_id = $1 and name = $2',
      [projectId, name],
    );
    return rowCount === 1;
  });
  if (!deleted) throw new NotFoundError(`project "${projectId}" has no secret ${name}`);
  await audit(pool, by, { projectId, action: 'secret', detail: `${name} deleted` });
}

/** The names of a project's secrets and when each changed; never the values. */
export async function listSecrets(
  db: Queryable,
  projectId: string,
): Promise<{ name: string; updated_at: Date }[]> {
  await getProject(db, projectId);
  const { rows } = await db.query<{ name: string; updated_at: Date }>(
    'select name, updated_at from project_secrets where project_id = $1 order by name',
    [projectId],
  );
  return rows;
}

/** The values of the named secrets of a project, decrypted (for a claimed task of a trusted job). */
export async function secretValues(
  db: Queryable,
  keyring: Keyring,
  projectId: string,
  names: string[],
  /** Opens each value through this (to name the secret in an error); default: directly. */
  each: (name: string, open: () => string) => string = (_name, open) => open(),
): Promise<Record<string, string>> {
  if (names.length === 0) return {};
  const { rows } = await db.query<{ name: string; value_enc: string }>(
    'select name, value_enc from project_secrets where project_id = $1 and name = any($2::text[])',
    [projectId, names],
  );
  return Object.fromEntries(
    rows.map((r) => [
      r.name,
      each(r.name, () => decrypt(keyring, r.value_enc, sealContext.secret(projectId, r.name))),
    ]),
  );
}
