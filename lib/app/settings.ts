// What the settings and Add pages (lib/pages/settings.ts, onboard.ts) may do, as the admin
// API's own use cases do it: the same schemas (a field's error names it), the same audit rows
// with the signed-in person, the same idle-gate updates. Who may call each is the page's
// question (`may`); the rules that depend on more than the repository's permission live here:
// a worker that serves other projects too, and an `org:` group that another project is in,
// need the admin token.
import type { AppContext } from '../context.ts';
import { ForbiddenError, NotFoundError, ValidationError } from '../errors.ts';
import { zodIssues } from '../http/index.ts';
import type { ProjectAdmin } from '../pages/settings.ts';
import type { Person } from '../people/sessions.ts';
import * as z from '../zod.ts';
import {
  createNotification,
  deleteNotification,
  listNotifications,
  NotificationCreateSchema,
} from './notifications.ts';
import {
  AddProjectSchema,
  addProjectFromForge,
  projectIdFor,
  removeProject,
  repositoriesFor,
} from './onboarding.ts';
import {
  deleteSecret,
  getProject,
  listSecrets,
  ProjectUpdateSchema,
  putSecret,
  SecretPutSchema,
  updateProject,
} from './projects.ts';
import {
  changeSchedule,
  createSchedule,
  projectSchedules,
  removeSchedule,
  ScheduleCreateSchema,
  ScheduleUpdateSchema,
} from './schedules.ts';
import { listWorkers, revokeWorker } from './workers.ts';

function parse<S extends z.core.$ZodType>(schema: S, value: unknown): z.infer<S> {
  const parsed = z.safeParse(schema, value);
  if (!parsed.success) throw new ValidationError(zodIssues(parsed.error));
  return parsed.data;
}

/** The workers that may claim the project's tasks: scoped to it, or to every project. */
async function servingWorkers(ctx: AppContext, id: string) {
  await getProject(ctx.pool, id);
  return (await listWorkers(ctx.pool)).filter(
    (w) => !w.revoked && (w.projects === '*' || w.projects.includes(id)),
  );
}

/** The ProjectAdmin the api function hands the pages. */
export const projectAdmin: ProjectAdmin = {
  async project(ctx, id) {
    const project = await getProject(ctx.pool, id);
    const { rows } = await ctx.pool.query<{ hook: boolean }>(
      'select forge_hook_id is not null as hook from projects where id = $1',
      [id],
    );
    return { ...project, hook_made: rows[0]?.hook ?? false };
  },

  async update(ctx, id, fields, by) {
    const parsed = parse(ProjectUpdateSchema, fields);
    // The form sends every field: only those that change are applied and audited.
    const current = (await getProject(ctx.pool, id)) as unknown as Record<string, unknown>;
    const input = Object.fromEntries(
      Object.entries(parsed).filter(
        ([key, value]) => JSON.stringify(value) !== JSON.stringify(current[key]),
      ),
    ) as typeof parsed;
    if (Object.keys(input).length === 0) return;
    if (input.org_groups && by.kind !== 'admin') await mayJoin(ctx, id, input.org_groups);
    await updateProject(ctx.pool, ctx.keyring, id, input, by, ctx.gate);
  },

  secrets: (ctx, id) => listSecrets(ctx.pool, id),
  async putSecret(ctx, id, name, value, by) {
    const { value: checked } = parse(SecretPutSchema, { value });
    await getProject(ctx.pool, id);
    return putSecret(ctx.pool, ctx.keyring, id, name, checked, by);
  },
  deleteSecret: (ctx, id, name, by) => deleteSecret(ctx.pool, id, name, by),

  notifications: (ctx, id) => listNotifications(ctx.pool, id),
  async createNotification(ctx, id, fields, by) {
    const input = parse(NotificationCreateSchema, fields);
    const { notification, secret } = await createNotification(ctx.pool, ctx.keyring, id, input, by);
    return { kind: notification.kind, secret: secret ?? null };
  },
  deleteNotification: (ctx, id, nid, by) => deleteNotification(ctx.pool, id, nid, by),

  schedules: (ctx, id) => projectSchedules(ctx, id),
  async createSchedule(ctx, id, fields, by) {
    await createSchedule(ctx, id, parse(ScheduleCreateSchema, fields), new Date(), by);
  },
  async changeSchedule(ctx, id, name, fields, by) {
    await changeSchedule(ctx, id, name, parse(ScheduleUpdateSchema, fields), new Date(), by);
  },
  removeSchedule: (ctx, id, name, by) => removeSchedule(ctx, id, name, by),

  workers: servingWorkers,
  async revokeWorker(ctx, id, workerId, by) {
    const worker = (await servingWorkers(ctx, id)).find((w) => w.id === workerId);
    if (!worker) throw new NotFoundError(`no worker ${workerId} serves project ${id}`);
    const shared = worker.projects === '*' || worker.projects.length !== 1;
    if (shared && by.kind !== 'admin') {
      throw new ForbiddenError(
        `worker ${worker.name} claims tasks of other projects too: only the admin token may revoke it.`,
      );
    }
    await revokeWorker(ctx.pool, worker.id, ctx.gate, by);
  },

  async removeProject(ctx, id, by) {
    const { hook } = await removeProject(ctx, id, by);
    return { left: typeof hook === 'object' ? hook.left : null };
  },

  async repositories(ctx, person) {
    const offers = await repositoriesFor(ctx, person);
    return offers.map((o) => ({
      ...o,
      repos: o.repos.map((r) => ({ ...r, suggestedId: r.project ?? projectIdFor(r.repo) })),
    }));
  },
  async addProject(ctx, person, fields, origin) {
    const { project } = await addProjectFromForge(
      ctx,
      person,
      parse(AddProjectSchema, fields),
      origin,
    );
    return {
      projectId: project.id,
      githubApp: project.github_app,
      // Made from the page, its visibility is the repository's.
      private: project.visibility === 'private',
    };
  },
};

/**
 * An `org:` group lets a project's pipelines replace and cancel the jobs of every other project
 * in it (docs/security.md): a person the forge makes admin of one repository may leave groups
 * and start groups of their own, but joining one that another project is in takes the admin token.
 */
async function mayJoin(ctx: AppContext, id: string, groups: string[]): Promise<void> {
  const current = (await getProject(ctx.pool, id)).org_groups;
  const added = groups.map((g) => g.toLowerCase()).filter((g) => !current.includes(g));
  if (added.length === 0) return;
  const { rows } = await ctx.pool.query<{ group: string }>(
    `select distinct g as group from projects, unnest(org_groups) as g
      where id <> $1 and g = any($2::text[]) order by 1`,
    [id, added],
  );
  if (rows.length > 0) {
    throw new ForbiddenError(
      `org_groups: ${rows.map((r) => `org:${r.group}`).join(', ')} is used by another project; joining it lets this project's pipelines cancel and replace that project's jobs, so it takes the admin token.`,
    );
  }
}

export type { Person };
