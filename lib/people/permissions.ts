// What a person may do, as the forge says it: each action needs a level of
// the repository's permission (read, write, admin), and the forge's answer is
// kept for at most five minutes, so someone removed from the repository loses
// access within that time.
import { type Pool, type Queryable, transaction } from '../db/index.ts';
import type { ForgeKind } from '../forge/forge.ts';
import type { RepoPermission } from '../forge/permission.ts';
import { peopleNow } from './clock.ts';

/** How long the forge's answer about a person is trusted (issue #31: at most five minutes). */
export const PERMISSION_TTL_MS = 5 * 60 * 1000;

/** Everything a person may ask of a project. */
export const ACTIONS = [
  'view',
  'rerun',
  'cancel',
  'approve',
  'unblock',
  'run',
  'settings',
  'secrets',
  'schedules',
  'workers',
  'see_settings',
] as const;
export type Action = (typeof ACTIONS)[number];

/** The repository permission each action needs (read: view; write: act on jobs; admin: settings). */
export const ACTION_NEEDS: Readonly<Record<Action, Exclude<RepoPermission, 'none'>>> = {
  view: 'read',
  rerun: 'write',
  cancel: 'write',
  approve: 'write',
  unblock: 'write',
  run: 'write',
  settings: 'admin',
  secrets: 'admin',
  schedules: 'admin',
  workers: 'admin',
  // The settings page without its forms: secrets' names, schedules, policies, workers.
  see_settings: 'write',
};

const RANK: Readonly<Record<RepoPermission, number>> = { none: 0, read: 1, write: 2, admin: 3 };

/** Whether a permission covers what an action needs. */
export function permits(permission: RepoPermission, action: Action): boolean {
  return RANK[permission] >= RANK[ACTION_NEEDS[action]];
}

/** Words for an action in a refusal: "rerun a job needs write access". */
export const ACTION_WORDS: Readonly<Record<Action, string>> = {
  view: 'seeing this project',
  rerun: 'rerunning a job',
  cancel: 'cancelling a job',
  approve: 'approving a job',
  unblock: 'unblocking a step',
  run: 'starting a job',
  settings: "changing the project's settings",
  secrets: "changing the project's secrets",
  schedules: "changing the project's schedules",
  workers: "changing the workers' scope",
  see_settings: "seeing the project's settings",
};

export interface CacheKey {
  projectId: string;
  forge: ForgeKind;
  login: string;
  repo: string;
}

/** The forge's answer about a person on a project, if it was given less than five minutes ago. */
export async function cachedPermission(
  db: Queryable,
  key: CacheKey,
): Promise<RepoPermission | null> {
  const now = peopleNow();
  const { rows } = await db.query<{ permission: RepoPermission; checked_ms: number }>(
    `select permission, extract(epoch from checked_at)::float8 * 1000 as checked_ms
       from person_permissions
      where project_id = $1 and forge = $2 and login = lower($3) and repo = $4`,
    [key.projectId, key.forge, key.login, key.repo],
  );
  const row = rows[0];
  // A time ahead of the clock (a test's clock set back) is not fresh either.
  if (!row || row.checked_ms > now || now - row.checked_ms >= PERMISSION_TTL_MS) return null;
  return row.permission;
}

/** Keeps the forge's answer, with the time it was given. */
export async function rememberPermission(
  pool: Pool,
  key: CacheKey,
  permission: RepoPermission,
): Promise<void> {
  // Two people's first looks at once write the same row: the helper retries
  // the 40001 that REPEATABLE READ raises for the second.
  await transaction(pool, (tx) =>
    tx.query(
      `insert into person_permissions (project_id, forge, login, repo, permission, checked_at)
     values ($1, $2, lower($3), $4, $5, to_timestamp($6))
     on conflict (project_id, forge, login) do update
       set repo = excluded.repo, permission = excluded.permission, checked_at = excluded.checked_at`,
      [key.projectId, key.forge, key.login, key.repo, permission, peopleNow() / 1000],
    ),
  );
}

/** Forgets what the forge said of everyone on a project (its token or URL changed). */
export async function forgetPermissions(pool: Pool, projectId: string): Promise<void> {
  await transaction(pool, (tx) =>
    tx.query('delete from person_permissions where project_id = $1', [projectId]),
  );
}
