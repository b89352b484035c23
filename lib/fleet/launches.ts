// Launches (migrations/022_pools.sql): which runners to start, decided in one
// transaction under the pools' locks, and what the sweep finds of them later.
import type { Queryable } from '../db/index.ts';
import { POOL_COLUMNS, type PoolRow } from './pools.ts';

/** A launch decided and not yet carried out, with the plain token of its worker (never stored). */
export interface DecidedLaunch {
  id: string;
  pool: PoolRow;
  projectId: string;
  workerId: string;
  token: string;
  tries: number;
}

interface Demand {
  id: string;
  labels: string[];
  trusted: boolean;
  project_id: string;
}

interface Supply {
  labels: string[];
  untrusted: boolean;
  projects: string[] | null;
}

// How long a launch's decider has to carry it out before the sweep does
// (with a new token): a spawn takes milliseconds, a RunTask a second or two.
const CARRY_OUT_S = 60;
// A polling worker seen this recently, and running nothing, is taken to be
// idle: a task it can take gets no launch. Its last_seen_at moves at most
// once a minute (lib/app/workers.ts), so the window is two.
const IDLE_SEEN_S = 120;
// Tasks looked at per decision: a pool's max is far below it.
const DEMAND_LIMIT = 500;

const serves = (s: Supply, t: Demand) =>
  s.untrusted === !t.trusted &&
  t.labels.every((l) => s.labels.includes(l)) &&
  (s.projects === null || s.projects.includes(t.project_id));

const poolServes = (p: PoolRow, t: Demand) =>
  serves(
    {
      labels: p.labels,
      untrusted: p.trust === 'untrusted',
      projects: p.projects === '*' ? null : p.projects,
    },
    t,
  );

/**
 * Decides the launches the queue calls for, inside the caller's transaction
 * (READ COMMITTED, after lockPools: two deciders take turns, and the second
 * counts the first's launches). A claimable task (queued, its groups open, or
 * an expired lease to take over) gets a launch when no idle runner can take
 * it: neither a launched one that has not claimed yet nor a polling worker
 * seen lately and running nothing. One launch per task, in queue order, in
 * the first pool by name that serves it and has room under its max. Each
 * launch is a row and an ephemeral worker scoped to the task's project and
 * the pool's labels and trust; `mint` makes the worker's token and its hash.
 */
export async function decideLaunches(
  tx: Queryable,
  pools: PoolRow[],
  mint: () => { token: string; hash: Buffer },
): Promise<DecidedLaunch[]> {
  if (pools.length === 0) return [];
  // The group checks are the claim's own (migrations/functions).
  const { rows: demand } = await tx.query<Demand>(
    `select t.id, t.labels, t.trusted, j.project_id
       from tasks t join jobs j on j.id = t.job_id
      where j.state = 'running'
        and ((t.state = 'queued'
              and (j.concurrency_key is null or j.group_held
                   or conductor_job_group_open(j.concurrency_key, j.concurrency_limit, j.created_at, j.id))
              and (t.concurrency_key is null
                   or conductor_task_group_open(t.concurrency_key, t.concurrency_limit, t.job_created_at, t.position)))
             or (t.state = 'running' and t.lease_expires_at < now()
                 and t.attempt < t.max_attempts and not t.cancel_requested))
      order by t.job_created_at, t.position
      limit ${DEMAND_LIMIT}`,
  );
  if (demand.length === 0) return [];
  const { rows: live } = await tx.query<{
    pool: string;
    waiting: boolean;
    labels: string[];
    untrusted: boolean;
    project_id: string;
  }>(
    `select l.pool, w.claimed_lease is null and not w.revoked as waiting,
            w.labels, w.untrusted, l.project_id
       from runner_launches l join workers w on w.id = l.worker_id
      where l.state <> 'ended'`,
  );
  const { rows: idle } = await tx.query<Supply>(
    `select w.labels, w.untrusted, w.projects from workers w
      where not w.revoked and not w.ephemeral
        and w.last_seen_at > now() - make_interval(secs => ${IDLE_SEEN_S})
        and not exists (select 1 from tasks t where t.state = 'running' and t.worker_id = w.id)`,
  );
  const supply: Supply[] = [
    ...live
      .filter((l) => l.waiting)
      .map((l) => ({ labels: l.labels, untrusted: l.untrusted, projects: [l.project_id] })),
    ...idle,
  ];
  const count = new Map<string, number>();
  for (const l of live) count.set(l.pool, (count.get(l.pool) ?? 0) + 1);

  const decided: DecidedLaunch[] = [];
  for (const task of demand) {
    const taker = supply.findIndex((s) => serves(s, task));
    if (taker >= 0) {
      supply.splice(taker, 1);
      continue;
    }
    const pool = pools.find((p) => poolServes(p, task) && (count.get(p.name) ?? 0) < p.max);
    if (!pool) continue;
    count.set(pool.name, (count.get(pool.name) ?? 0) + 1);
    const { token, hash } = mint();
    const { rows } = await tx.query<{ launch_id: string; worker_id: string }>(
      `with w as (
         insert into workers (name, token_hash, labels, untrusted, projects, ephemeral)
         values ('pool ' || $1, $2, $3, $4, array[$5::text], true)
         returning id)
       insert into runner_launches (pool, task_id, project_id, worker_id, tries, retry_at)
       select $1, $6, $5, w.id, 1, now() + make_interval(secs => ${CARRY_OUT_S}) from w
       returning id as launch_id, worker_id`,
      [pool.name, hash, pool.labels, pool.trust === 'untrusted', task.project_id, task.id],
    );
    const row = rows[0]!;
    decided.push({
      id: row.launch_id,
      pool,
      projectId: task.project_id,
      workerId: row.worker_id,
      token,
      tries: 1,
    });
  }
  return decided;
}

/**
 * Takes a pending launch whose time has come (its decider lost, or a retry
 * after a failure) for this carrier: a new try, a new token for its worker
 * (the old one stops working, so a runner the lost decider may have started
 * cannot claim), and CARRY_OUT_S before anyone takes it again. A launch whose
 * task no longer waits is ended instead (answered as `ended`).
 */
export async function takeDueLaunch(
  tx: Queryable,
  mint: () => { token: string; hash: Buffer },
): Promise<DecidedLaunch | { ended: string } | undefined> {
  const { rows } = await tx.query<{
    id: string;
    pool_row: PoolRow | null;
    project_id: string;
    worker_id: string;
    tries: number;
    wanted: boolean;
  }>(
    `select l.id, l.project_id, l.worker_id, l.tries,
            (select to_jsonb(x) from (select ${POOL_COLUMNS} from pools p where p.name = l.pool) x) as pool_row,
            exists (select 1 from tasks t where t.id = l.task_id and t.state in ('queued', 'running')) as wanted
       from runner_launches l
      where l.state = 'pending' and l.retry_at <= now()
      order by l.retry_at
      limit 1
      for update of l skip locked`,
  );
  const l = rows[0];
  if (!l) return undefined;
  if (!l.pool_row || !l.wanted) {
    await endLaunch(tx, l.id, l.pool_row ? 'its task no longer waits' : 'its pool was deleted');
    return { ended: l.worker_id };
  }
  const { token, hash } = mint();
  await tx.query('update workers set token_hash = $2 where id = $1 and claimed_lease is null', [
    l.worker_id,
    hash,
  ]);
  await tx.query(
    `update runner_launches set tries = tries + 1,
            retry_at = now() + make_interval(secs => ${CARRY_OUT_S})
      where id = $1`,
    [l.id],
  );
  return {
    id: l.id,
    pool: l.pool_row,
    projectId: l.project_id,
    workerId: l.worker_id,
    token,
    tries: l.tries + 1,
  };
}

/** Records that try `tries` of a launch started `ref`; false when another carrier has taken it since. */
export async function markStarted(
  db: Queryable,
  id: string,
  tries: number,
  ref: string,
): Promise<boolean> {
  const { rowCount } = await db.query(
    `update runner_launches set state = 'started', provider_ref = $3, started_at = now(), error = null
      where id = $1 and tries = $2 and state = 'pending'`,
    [id, tries, ref],
  );
  return (rowCount ?? 0) > 0;
}

/** Leaves a pending launch to the next sweep at once (its decider has no provider for it). */
export async function leaveToSweep(db: Queryable, id: string, tries: number): Promise<void> {
  await db.query(
    `update runner_launches set retry_at = now() where id = $1 and tries = $2 and state = 'pending'`,
    [id, tries],
  );
}

/** Records a failed try: the launch stays pending, tried again after `retryInMs`, and its error is the task's waiting reason. */
export async function markFailed(
  db: Queryable,
  id: string,
  tries: number,
  error: string,
  retryInMs: number,
): Promise<void> {
  await db.query(
    `update runner_launches
        set error = left($3, 500), retry_at = now() + make_interval(secs => $4::double precision / 1000)
      where id = $1 and tries = $2 and state = 'pending'`,
    [id, tries, error, retryInMs],
  );
}

/** Ends a launch and revokes its worker in the database (the idle gate is the caller's). */
export async function endLaunch(db: Queryable, id: string, why: string): Promise<void> {
  await db.query(
    `with l as (update runner_launches set state = 'ended', ended_at = now(),
                       error = coalesce(error, $2)
                 where id = $1 and state <> 'ended' returning worker_id)
     update workers w set revoked = true from l where w.id = l.worker_id`,
    [id, why],
  );
}

/**
 * Ends a started launch whose runner has exited (its provider said so);
 * answers its worker, or undefined when the launch was not started (ended
 * already, or taken over by another carrier with a new token).
 */
export async function endExited(
  db: Queryable,
  id: string,
  ref: string,
): Promise<string | undefined> {
  const { rows } = await db.query<{ worker_id: string }>(
    `with l as (update runner_launches l set state = 'ended', ended_at = now(),
                       error = coalesce(l.error, case when w.claimed_lease is null
                                                      then 'its runner exited without claiming'
                                                      else null end)
                  from workers w
                 where l.id = $1 and l.provider_ref = $2 and l.state = 'started' and w.id = l.worker_id
                returning l.worker_id)
     update workers w set revoked = true from l where w.id = l.worker_id returning w.id as worker_id`,
    [id, ref],
  );
  return rows[0]?.worker_id;
}

/** A started launch, as the sweep looks at it. */
export interface StartedLaunch {
  id: string;
  pool: string;
  worker_id: string;
  provider_ref: string;
  /** Its worker claimed, and that attempt has ended. */
  finished: boolean;
  /** Its worker claimed a task that still runs under its lease. */
  claimed: boolean;
  /** Seconds since the provider started it. */
  age_s: number;
  pool_exists: boolean;
}

/** Every started launch, with what its worker did. */
export async function startedLaunches(db: Queryable): Promise<StartedLaunch[]> {
  const { rows } = await db.query<StartedLaunch>(
    `select l.id, l.pool, l.worker_id, l.provider_ref,
            w.claimed_lease is not null
              and not exists (select 1 from tasks t where t.lease_id = w.claimed_lease and t.state = 'running')
              as finished,
            w.claimed_lease is not null as claimed,
            extract(epoch from now() - l.started_at)::float8 as age_s,
            exists (select 1 from pools p where p.name = l.pool) as pool_exists
       from runner_launches l join workers w on w.id = l.worker_id
      where l.state = 'started'`,
  );
  return rows;
}

/** Whether any pool exists (a stack without pools never decides anything). */
export async function anyPool(db: Queryable): Promise<boolean> {
  const { rows } = await db.query<{ any: boolean }>(
    'select exists (select 1 from pools) or exists (select 1 from runner_launches where state <> $1) as any',
    ['ended'],
  );
  return rows[0]!.any;
}
