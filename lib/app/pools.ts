// Runner pools (issue #51; docs/runner.md, "Runner pools"): the admin's
// routes, the hook the transitions that make tasks claimable call after
// their commit (afterTasksClaimable), and the sweep's reconcile
// (reconcilePools). The decisions are rows (lib/fleet/launches.ts); the
// providers (lib/fleet/) only carry them out.
import type { AppContext } from '../context.ts';
import { transaction } from '../db/index.ts';
import { ConflictError, NotFoundError, ValidationError } from '../errors.ts';
import {
  anyPool,
  type DecidedLaunch,
  decideLaunches,
  endExited,
  endLaunch,
  leaveToSweep,
  markFailed,
  markStarted,
  startedLaunches,
  takeDueLaunch,
} from '../fleet/launches.ts';
import {
  deletePoolRow,
  getPoolView,
  insertPool,
  listPoolViews,
  lockPools,
  type PoolRow,
  type PoolView,
  updatePoolRow,
} from '../fleet/pools.ts';
import { PROCESS_IDLE_LIMIT_S, type ProcessSettings } from '../fleet/process.ts';
import { LaunchError, type Providers } from '../fleet/provider.ts';
import { hashToken, newToken } from '../http/auth.ts';
import { publishWorker } from '../idle/workers.ts';
import { log } from '../log.ts';
import { ADMIN_BEARER, type Person } from '../people/sessions.ts';
import { POOL_PROVIDERS } from '../states.ts';
import * as z from '../zod.ts';
import { auditInstallation, CONTROL_PLANE } from './audit.ts';
import { LABEL } from './workers.ts';

const PROJECT_ID = /^[a-z0-9][a-z0-9-]{0,62}$/;

const fields = {
  labels: z
    .array(z.string().check(z.regex(LABEL, 'labels are letters, digits and _ . : -, up to 63')))
    .check(z.maxLength(50)),
  trust: z.enum(['trusted', 'untrusted']),
  projects: z.union([
    z.literal('*'),
    z
      .array(z.string().check(z.regex(PROJECT_ID, 'a project id')))
      .check(z.minLength(1, 'at least one project, or "*" for every project'), z.maxLength(100)),
  ]),
  provider: z.enum(POOL_PROVIDERS),
  max: z.number().check(z.int(), z.gte(0), z.lte(1000)),
  settings: z.record(z.string(), z.unknown()),
};

export const PoolCreateSchema = z.strictObject({
  name: z
    .string()
    .check(
      z.regex(
        /^[a-z0-9][a-z0-9-]{0,62}$/,
        'lowercase letters, digits and -, up to 63, as a-z0-9 first',
      ),
    ),
  labels: z._default(fields.labels, []),
  trust: z._default(fields.trust, 'trusted'),
  projects: z._default(fields.projects, '*'),
  provider: fields.provider,
  max: fields.max,
  settings: z._default(fields.settings, {}),
});
export type PoolCreate = z.infer<typeof PoolCreateSchema>;

export const PoolUpdateSchema = z.strictObject({
  labels: z.optional(fields.labels),
  trust: z.optional(fields.trust),
  projects: z.optional(fields.projects),
  provider: z.optional(fields.provider),
  max: z.optional(fields.max),
  settings: z.optional(fields.settings),
});
export type PoolUpdate = z.infer<typeof PoolUpdateSchema>;

/**
 * The providers this control plane offers: the context's (lib/app/fleet-aws.ts
 * adds `ecs` in the functions that carry its SDK, the local stack `process`
 * and `ecs`). A launch decided where its provider is not (the compile and
 * completion functions, whose bundles stay small) is left to the sweep.
 */
export function providersOf(ctx: AppContext): Providers {
  return ctx.fleet ?? {};
}

/** Checks a pool's settings for its provider and trust; throws a 400 naming the field. */
function checkSettings(ctx: AppContext, pool: Omit<PoolRow, 'created_at' | 'updated_at'>): void {
  const provider = providersOf(ctx)[pool.provider];
  if (!provider) {
    throw new ValidationError([
      {
        path: 'provider',
        message: `the ${pool.provider} provider is not available on this control plane (process runs runners on the machine of npm start or conductor server)`,
      },
    ]);
  }
  const parsed = z.safeParse(provider.settings, pool.settings);
  if (!parsed.success) {
    throw new ValidationError(
      parsed.error.issues.map((i) => ({
        path: ['settings', ...i.path.map(String)].join('.'),
        message: i.message,
      })),
    );
  }
  if (pool.provider === 'process' && pool.trust === 'untrusted') {
    const s = parsed.data as ProcessSettings;
    if (s.executor !== 'docker' && (!s.run_as || s.same_user)) {
      throw new ValidationError([
        {
          path: 'settings.executor',
          message:
            'an untrusted process pool runs fork pull requests: give executor "docker" (or run_as a user other than the runner\'s)',
        },
      ]);
    }
  }
}

async function checkProjects(ctx: AppContext, projects: string[] | '*'): Promise<void> {
  if (projects === '*') return;
  const { rows } = await ctx.pool.query<{ id: string }>(
    'select id from projects where id = any($1::text[])',
    [projects],
  );
  const known = new Set(rows.map((r) => r.id));
  const unknown = projects.map((id, i) => ({ id, i })).filter(({ id }) => !known.has(id));
  if (unknown.length > 0) {
    throw new ValidationError(
      unknown.map(({ id, i }) => ({
        path: `projects.${i}`,
        message: `project "${id}" does not exist`,
      })),
    );
  }
}

const noPoolsSeen = new WeakMap<AppContext, number>();

// A pool as the installation's audit names it: its provider, trust, labels,
// projects and max (its settings may name hosts and buckets: left out).
function poolDetail(p: Omit<PoolRow, 'created_at' | 'updated_at'>): string {
  const labels = p.labels.length > 0 ? p.labels.join(', ') : 'none';
  const scope = p.projects === '*' ? 'every project' : `projects ${p.projects.join(', ')}`;
  return `${p.name}: ${p.provider}, ${p.trust}; labels ${labels}; ${scope}; max ${p.max}`;
}

/** Creates a pool (admin). A name taken is a 409. */
export async function createPool(
  ctx: AppContext,
  input: PoolCreate,
  by: Person = ADMIN_BEARER,
): Promise<PoolView> {
  checkSettings(ctx, input);
  await checkProjects(ctx, input.projects);
  const row = await insertPool(ctx.pool, input);
  if (!row) throw new ConflictError(`pool ${input.name} already exists`);
  await auditInstallation(ctx.pool, by, {
    action: 'pool.create',
    subject: row.name,
    detail: poolDetail(row),
  });
  noPoolsSeen.delete(ctx);
  // Tasks already queued may be the new pool's.
  await afterTasksClaimable(ctx);
  return (await getPoolView(ctx.pool, row.name))!;
}

/** Every pool with its runners. */
export async function listPools(ctx: AppContext): Promise<PoolView[]> {
  return listPoolViews(ctx.pool);
}

/** Changes a pool (admin); its runners already started keep their workers. */
export async function updatePool(
  ctx: AppContext,
  name: string,
  input: PoolUpdate,
  by: Person = ADMIN_BEARER,
): Promise<PoolView> {
  const current = await getPoolView(ctx.pool, name);
  if (!current) throw new NotFoundError(`pool ${name} does not exist`);
  const next = { ...current, ...input };
  if (input.settings || input.provider || input.trust) checkSettings(ctx, next);
  if (input.projects) await checkProjects(ctx, input.projects);
  const row = await updatePoolRow(ctx.pool, name, input);
  if (!row) throw new NotFoundError(`pool ${name} does not exist`);
  const changed = Object.keys(input).sort().join(', ');
  await auditInstallation(ctx.pool, by, {
    action: 'pool.update',
    subject: name,
    detail: `${poolDetail(row)} (changed: ${changed || 'nothing'})`,
  });
  await afterTasksClaimable(ctx);
  return (await getPoolView(ctx.pool, name))!;
}

/** Deletes a pool (admin); the sweep ends its launches and revokes their workers. */
export async function deletePool(
  ctx: AppContext,
  name: string,
  by: Person = ADMIN_BEARER,
): Promise<void> {
  const pool = await getPoolView(ctx.pool, name);
  if (!pool || !(await deletePoolRow(ctx.pool, name)))
    throw new NotFoundError(`pool ${name} does not exist`);
  await auditInstallation(ctx.pool, by, {
    action: 'pool.delete',
    subject: name,
    detail: poolDetail(pool),
  });
  // Its runners are stopped now, while its provider and settings are known
  // (the sweep no longer knows them): their launches end and their workers
  // are revoked. A stop that fails leaves a runner whose worker is revoked,
  // which exits within its idle limit.
  const provider = providersOf(ctx)[pool.provider];
  for (const l of (await startedLaunches(ctx.pool)).filter((x) => x.pool === name)) {
    await provider
      ?.stop(pool, l.provider_ref)
      .catch((err) => log('warn', "could not stop a deleted pool's runner", { pool: name, err }));
    await endLaunch(ctx.pool, l.id, 'its pool was deleted');
    await launchEnded(ctx, l.worker_id);
  }
}

const mint = () => {
  const token = newToken('cw');
  return { token, hash: hashToken(token) };
};

// A stack that has never had a pool asks the database whether it has one at
// most this often from the hot paths (a completion, a compile): the sweep
// and a pool's creation look regardless.
const NO_POOLS_TTL_MS = 5_000;

/**
 * The after-commit hook of every transition that makes tasks claimable
 * (compile, a follow-up, a retry, an unblock; the sweep's requeues go through
 * reconcilePools): decides the launches the queue now calls for, in a
 * transaction of its own, and carries them out after its commit. A hint, not
 * a grant, and never raises: what it leaves undone the sweep does. Issue #52
 * wakes polling runners from the same places.
 */
export async function afterTasksClaimable(ctx: AppContext): Promise<void> {
  try {
    const seen = noPoolsSeen.get(ctx);
    if (seen !== undefined && Date.now() - seen < NO_POOLS_TTL_MS) return;
    if (!(await anyPool(ctx.pool))) {
      noPoolsSeen.set(ctx, Date.now());
      return;
    }
    noPoolsSeen.delete(ctx);
    await carryOut(ctx, await decide(ctx));
  } catch (err) {
    log('warn', 'could not decide runner launches; the sweep will', { err });
  }
}

/** One decision: the pools locked, the launches written, committed. */
function decide(ctx: AppContext): Promise<DecidedLaunch[]> {
  // READ COMMITTED: the statements after the pools' lock read what the
  // decider before us committed, so the max holds across deciders.
  return transaction(ctx.pool, async (tx) => decideLaunches(tx, await lockPools(tx), mint), {
    isolation: 'read committed',
  });
}

/** A failed try's wait: 5 s doubling to 5 minutes, jittered by up to a half. */
export function launchBackoffMs(tries: number, random = Math.random): number {
  const base = Math.min(5_000 * 2 ** Math.max(0, tries - 1), 300_000);
  return Math.round(base * (0.5 + random() / 2));
}

/** The control plane's URL as a launched runner reaches it. */
function runnerUrl(ctx: AppContext, pool: PoolRow): string | undefined {
  const own = pool.settings.url;
  return typeof own === 'string' ? own : ctx.config.CONDUCTOR_PUBLIC_URL;
}

/** Carries out launches decided and committed; each failure is recorded on its row. */
async function carryOut(ctx: AppContext, launches: DecidedLaunch[]): Promise<number> {
  const providers = providersOf(ctx);
  const results = await Promise.all(
    launches.map(async (l) => {
      const provider = providers[l.pool.provider];
      if (!provider) {
        // Decided where its provider is not loaded: the next sweep carries it out.
        await leaveToSweep(ctx.pool, l.id, l.tries);
        return false;
      }
      try {
        const url = runnerUrl(ctx, l.pool) ?? ctx.runnerUrl;
        if (!url) {
          throw new LaunchError(
            "the runner would not know where the control plane is: set CONDUCTOR_PUBLIC_URL or the pool's settings.url",
            false,
          );
        }
        if (ctx.gate) {
          await publishWorker(ctx.gate, hashToken(l.token), {
            labels: l.pool.labels,
            projects: [l.projectId],
            untrusted: l.pool.trust === 'untrusted',
            ephemeral: true,
            revoked: false,
          });
        }
        const ref = await provider.launch({
          launchId: l.id,
          attempt: l.tries,
          pool: l.pool,
          projectId: l.projectId,
          url,
          token: l.token,
        });
        if (!(await markStarted(ctx.pool, l.id, l.tries, ref))) {
          // Taken over by the sweep meanwhile (with a new token): ours cannot claim.
          await provider.stop(l.pool, ref).catch(() => {});
          return false;
        }
        await auditInstallation(ctx.pool, CONTROL_PLANE, {
          action: 'pool.launch',
          subject: l.workerId,
          detail: `${l.pool.name}: ${l.pool.provider} runner ${ref} for a task of project ${l.projectId}${l.tries > 1 ? ` (try ${l.tries})` : ''}`,
        });
        return true;
      } catch (err) {
        const message = err instanceof Error ? err.message : String(err);
        log('warn', 'a runner launch failed; it is tried again with backoff', {
          pool: l.pool.name,
          launch_id: l.id,
          tries: l.tries,
          err,
        });
        await markFailed(ctx.pool, l.id, l.tries, message, launchBackoffMs(l.tries)).catch((e) =>
          log('warn', 'could not record a failed launch', { err: e }),
        );
        return false;
      }
    }),
  );
  return results.filter(Boolean).length;
}

/**
 * A launch ended and the database revoked its worker: the installation's
 * audit says so (with why, as the launch row keeps it), and the idle gate
 * revokes the token too.
 */
async function launchEnded(ctx: AppContext, workerId: string): Promise<void> {
  const { rows } = await ctx.pool.query<{
    token_hash: Buffer;
    labels: string[];
    untrusted: boolean;
    projects: string[] | null;
    pool: string | null;
    why: string | null;
    started: boolean;
  }>(
    `select w.token_hash, w.labels, w.untrusted, w.projects, l.pool, l.error as why,
            l.started_at is not null as started
       from workers w left join runner_launches l on l.worker_id = w.id
      where w.id = $1`,
    [workerId],
  );
  const w = rows[0];
  if (!w) return;
  await auditInstallation(ctx.pool, CONTROL_PLANE, {
    action: 'pool.revoke',
    subject: workerId,
    detail: `${w.pool ?? 'a deleted pool'}: ${w.why ?? (w.started ? 'its runner finished' : 'never launched')}`,
  });
  if (!ctx.gate) return;
  await publishWorker(ctx.gate, w.token_hash, {
    labels: w.labels,
    projects: w.projects ?? '*',
    untrusted: w.untrusted,
    ephemeral: true,
    revoked: true,
  });
}

/**
 * A provider saw one of its runners exit (the process provider does, at
 * once): its launch ends, its worker is revoked, and the room it leaves
 * under its pool's max may go to a task still waiting. Never raises.
 */
export async function runnerExited(ctx: AppContext, launchId: string, ref: string): Promise<void> {
  try {
    const worker = await endExited(ctx.pool, launchId, ref);
    if (!worker) return;
    await launchEnded(ctx, worker);
    await afterTasksClaimable(ctx);
  } catch (err) {
    log('warn', 'could not end the launch of a runner that exited; the sweep will', { err });
  }
}

// A started runner that has claimed nothing this long past its idle limit
// has not exited as it should: it is stopped and its worker revoked.
const NEVER_CLAIMED_GRACE_S = 60;

export interface PoolsSummary {
  launches_started: number;
  launches_ended: number;
}

/**
 * The sweep's reconcile: ends the launches whose runner finished its task,
 * exited, or claimed nothing within its bound (revoking their workers and
 * stopping what still runs), carries out pending launches whose decider was
 * lost or whose last try failed, then decides what the queue still calls for.
 * A stack without pools reads one row and stops there.
 */
export async function reconcilePools(ctx: AppContext): Promise<PoolsSummary> {
  const summary = { launches_started: 0, launches_ended: 0 };
  if (!(await anyPool(ctx.pool))) return summary;
  const providers = providersOf(ctx);
  const pools = new Map((await listPoolViews(ctx.pool)).map((p) => [p.name, p]));
  const started = await startedLaunches(ctx.pool);
  const alive = new Map<string, Set<string> | undefined>();
  for (const name of new Set(started.map((l) => l.pool))) {
    const pool = pools.get(name);
    const provider = pool && providers[pool.provider];
    if (!pool || !provider) continue;
    const refs = started.filter((l) => l.pool === name).map((l) => l.provider_ref);
    alive.set(name, await provider.running(pool, refs).catch(() => undefined));
  }
  for (const l of started) {
    const pool = pools.get(l.pool);
    const running = alive.get(l.pool)?.has(l.provider_ref);
    const idleLimit = Number(pool?.settings.idle_limit_s ?? PROCESS_IDLE_LIMIT_S);
    let why: string | undefined;
    if (!l.pool_exists || !pool) why = 'its pool was deleted';
    else if (l.finished) why = 'its task ended';
    else if (running === false)
      why = l.claimed ? 'its runner is gone' : 'its runner exited without claiming';
    else if (!l.claimed && l.age_s > idleLimit + NEVER_CLAIMED_GRACE_S)
      why = `its runner claimed nothing within ${idleLimit + NEVER_CLAIMED_GRACE_S} s`;
    if (!why) continue;
    if (pool && running !== false)
      await providers[pool.provider]?.stop(pool, l.provider_ref).catch(() => {});
    await endLaunch(ctx.pool, l.id, why);
    await launchEnded(ctx, l.worker_id);
    summary.launches_ended++;
  }
  // Pending launches whose time has come, one transaction each.
  for (let i = 0; i < 50; i++) {
    const taken = await transaction(ctx.pool, (tx) => takeDueLaunch(tx, mint));
    if (!taken) break;
    if ('ended' in taken) {
      await launchEnded(ctx, taken.ended);
      summary.launches_ended++;
      continue;
    }
    summary.launches_started += await carryOut(ctx, [taken]);
  }
  summary.launches_started += await carryOut(ctx, await decide(ctx));
  return summary;
}
