-- Runner pools (issue #51, lib/fleet/): runners started on demand. A pool
-- serves tasks of its trust whose labels are among its labels, of its
-- projects (null: every project), with at most max_runners runners at once.
create table pools (
  name text primary key check (name ~ '^[a-z0-9][a-z0-9-]{0,62}$'),
  labels text[] not null default '{}',
  untrusted boolean not null default false,
  projects text[],
  provider text not null
    constraint pools_provider_check check (provider in ('process', 'ecs')),
  settings jsonb not null default '{}'::jsonb,
  max_runners integer not null check (max_runners between 0 and 1000),
  created_at timestamptz not null default now(),
  updated_at timestamptz not null default now()
);

-- A launch is written in the transaction that decides it, with its
-- ephemeral worker, and carried out after that commit by the pool's
-- provider: a process lost in between leaves a `pending` row the sweep
-- carries out (with a new token for the worker), never a second runner
-- holding a good token. No foreign key to pools: a deleted pool's launches
-- are ended by the sweep, and kept as history.
create table runner_launches (
  id uuid primary key default gen_random_uuid(),
  pool text not null,
  -- The task whose demand decided the launch (its runner may take another).
  task_id uuid references tasks (id) on delete set null,
  project_id text not null,
  worker_id uuid not null references workers (id) on delete cascade,
  state text not null default 'pending'
    constraint runner_launches_state_check check (state in ('pending', 'started', 'ended')),
  -- The provider's name for the runner (a pid, a task ARN).
  provider_ref text,
  tries integer not null default 0,
  -- A pending launch is carried out by whoever decided it until then, by
  -- the sweep after (and after each failure, with backoff).
  retry_at timestamptz not null default now(),
  error text,
  created_at timestamptz not null default now(),
  started_at timestamptz,
  ended_at timestamptz
);
create index runner_launches_live on runner_launches (pool) where state <> 'ended';
create index runner_launches_task on runner_launches (task_id) where state <> 'ended';
create index runner_launches_worker on runner_launches (worker_id);
