// Runner pools' rows (migrations/022_pools.sql): what the admin configures.
import type { Queryable } from '../db/index.ts';
import type { PoolProvider } from '../states.ts';

export interface PoolInput {
  name: string;
  labels: string[];
  trust: 'trusted' | 'untrusted';
  /** The project ids it serves, or "*" for every project. */
  projects: string[] | '*';
  provider: PoolProvider;
  settings: Record<string, unknown>;
  max: number;
}

export interface PoolRow extends PoolInput {
  created_at: Date;
  updated_at: Date;
}

/** A pool with its runners now: `starting` (launched, nothing claimed yet), `running` (a task claimed). */
export interface PoolView extends PoolRow {
  runners: { starting: number; running: number };
}

export const POOL_COLUMNS = `p.name, p.labels,
  case when p.untrusted then 'untrusted' else 'trusted' end as trust,
  case when p.projects is null then to_jsonb('*'::text) else to_jsonb(p.projects) end as projects,
  p.provider, p.settings, p.max_runners as max, p.created_at, p.updated_at`;

const RUNNERS = `(select jsonb_build_object(
    'starting', count(*) filter (where l.state = 'pending' or w.claimed_lease is null),
    'running', count(*) filter (where l.state = 'started' and w.claimed_lease is not null))
   from runner_launches l join workers w on w.id = l.worker_id
  where l.pool = p.name and l.state <> 'ended') as runners`;

const projectsOf = (p: string[] | '*') => (p === '*' ? null : [...new Set(p)].sort());

/** Inserts a pool; answers undefined when the name is taken. */
export async function insertPool(db: Queryable, p: PoolInput): Promise<PoolRow | undefined> {
  const { rows } = await db.query<PoolRow>(
    `insert into pools as p (name, labels, untrusted, projects, provider, settings, max_runners)
     values ($1, $2, $3, $4, $5, $6, $7)
     on conflict (name) do nothing
     returning ${POOL_COLUMNS}`,
    [
      p.name,
      [...new Set(p.labels)].sort(),
      p.trust === 'untrusted',
      projectsOf(p.projects),
      p.provider,
      p.settings,
      p.max,
    ],
  );
  return rows[0];
}

/** Every pool with its runners, by name. */
export async function listPoolViews(db: Queryable): Promise<PoolView[]> {
  const { rows } = await db.query<PoolView>(
    `select ${POOL_COLUMNS}, ${RUNNERS} from pools p order by p.name`,
  );
  return rows;
}

/** One pool with its runners, or undefined. */
export async function getPoolView(db: Queryable, name: string): Promise<PoolView | undefined> {
  const { rows } = await db.query<PoolView>(
    `select ${POOL_COLUMNS}, ${RUNNERS} from pools p where p.name = $1`,
    [name],
  );
  return rows[0];
}

/** Every pool, locked until the transaction ends (the launch decision's lock). */
export async function lockPools(db: Queryable): Promise<PoolRow[]> {
  const { rows } = await db.query<PoolRow>(
    `select ${POOL_COLUMNS} from pools p order by p.name for update`,
  );
  return rows;
}

/** Changes the fields given; answers the pool as it is now, or undefined when it does not exist. */
export async function updatePoolRow(
  db: Queryable,
  name: string,
  p: Partial<Omit<PoolInput, 'name'>>,
): Promise<PoolRow | undefined> {
  const { rows } = await db.query<PoolRow>(
    `update pools p set
       labels = coalesce($2, p.labels),
       untrusted = coalesce($3, p.untrusted),
       projects = case when $4::boolean then $5::text[] else p.projects end,
       provider = coalesce($6, p.provider),
       settings = coalesce($7, p.settings),
       max_runners = coalesce($8, p.max_runners),
       updated_at = now()
     where p.name = $1
     returning ${POOL_COLUMNS}`,
    [
      name,
      p.labels ? [...new Set(p.labels)].sort() : null,
      p.trust === undefined ? null : p.trust === 'untrusted',
      p.projects !== undefined,
      p.projects === undefined ? null : projectsOf(p.projects),
      p.provider ?? null,
      p.settings ?? null,
      p.max ?? null,
    ],
  );
  return rows[0];
}

/** Deletes a pool; answers whether it existed. Its live launches are ended by the sweep. */
export async function deletePoolRow(db: Queryable, name: string): Promise<boolean> {
  const { rowCount } = await db.query('delete from pools where name = $1', [name]);
  return (rowCount ?? 0) > 0;
}
