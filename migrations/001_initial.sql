-- Conductor's first schema. Every enumerated column is a named CHECK constraint
-- whose values match lib/states.ts (test/db/schema.test.ts compares them).
-- Only PostgreSQL 15 features: managed services still offer 15.

create table projects (
  id text primary key
    constraint projects_id_check check (id ~ '^[a-z0-9][a-z0-9-]{0,62}$'),
  name text not null check (length(name) between 1 and 200),
  forge text not null
    constraint projects_forge_check check (forge in ('github', 'gitea')),
  repo text not null check (repo ~ '^[^/[:space:]]+/[^/[:space:]]+$'),
  repo_url text not null check (length(repo_url) > 0),
  forge_url text,
  -- lib/secrets ciphertexts (AES-256-GCM with a key id), never plaintext.
  webhook_secret_enc text not null,
  forge_token_enc text,
  enabled boolean not null default true,
  cancel_superseded boolean not null default true,
  -- Next job number is job_counter + 1, taken with an UPDATE ... RETURNING so
  -- concurrent creations serialise on this row and never share a number.
  job_counter integer not null default 0,
  created_at timestamptz not null default now(),
  updated_at timestamptz not null default now()
);

-- Webhooks find their project by forge and repository full name; forges treat
-- owner/name case-insensitively.
create unique index projects_forge_repo on projects (forge, lower(repo));

create table workers (
  id uuid primary key default gen_random_uuid(),
  name text not null check (length(name) between 1 and 200),
  -- SHA-256 of the bearer token; the token itself is shown once and never kept.
  token_hash bytea not null unique,
  labels text[] not null default '{}',
  revoked boolean not null default false,
  created_at timestamptz not null default now(),
  last_seen_at timestamptz
);

create table jobs (
  id uuid primary key default gen_random_uuid(),
  project_id text not null references projects (id) on delete cascade,
  number integer not null check (number > 0),
  state text not null default 'pending'
    constraint jobs_state_check
    check (state in ('pending', 'running', 'success', 'failed', 'cancelled')),
  trigger text not null
    constraint jobs_trigger_check
    check (trigger in ('push', 'tag', 'pull_request', 'manual', 'rerun')),
  ref text not null check (length(ref) between 1 and 1024),
  -- SHA-1 or SHA-256 object names, lower-case hex.
  sha text not null check (sha ~ '^[0-9a-f]{40}([0-9a-f]{24})?$'),
  -- The branch a pull request merges into; `only` patterns match it.
  base_ref text,
  pull_request integer check (pull_request > 0),
  delivery_id text check (length(delivery_id) between 1 and 200),
  -- Fork pull requests are untrusted: no secret values, no forge token.
  trusted boolean not null,
  rerun_of uuid references jobs (id) on delete set null,
  pipeline_name text,
  -- One line per problem; `errors` holds the same as [{line, column, path, message}].
  error text,
  errors jsonb,
  compile_attempts integer not null default 0,
  dispatched_at timestamptz,
  created_at timestamptz not null default now(),
  started_at timestamptz,
  finished_at timestamptz,
  unique (project_id, number),
  -- A repeated webhook delivery answers the job it created the first time.
  unique (project_id, delivery_id),
  check ((state in ('success', 'failed', 'cancelled')) = (finished_at is not null))
);

-- The sweep's scans: running jobs with nothing left, pending jobs whose compile
-- was lost, and finished jobs past retention.
create index jobs_running on jobs (created_at) where state = 'running';
create index jobs_pending on jobs (dispatched_at nulls first) where state = 'pending';
create index jobs_finished on jobs (finished_at) where finished_at is not null;
-- Cancel superseded: the unfinished jobs of one project and ref.
create index jobs_unfinished_ref on jobs (project_id, ref) where state in ('pending', 'running');
-- Commit statuses are ordered per commit: the jobs of one project and sha.
create index jobs_commit on jobs (project_id, sha);
-- Deleting a job sets rerun_of null in its reruns; without this it scans jobs.
create index jobs_rerun_of on jobs (rerun_of) where rerun_of is not null;

create table tasks (
  id uuid primary key default gen_random_uuid(),
  job_id uuid not null references jobs (id) on delete cascade,
  position integer not null check (position >= 0),
  name text not null,
  base_name text not null,
  matrix jsonb not null default '{}',
  image text,
  script text[] not null,
  env jsonb not null default '{}',
  labels text[] not null default '{}',
  needs text[] not null default '{}',
  secrets text[] not null default '{}',
  -- Output names the pipeline declares this task gives.
  outputs text[] not null default '{}',
  state text not null
    constraint tasks_state_check
    check (state in ('waiting', 'queued', 'running', 'success', 'failed', 'skipped', 'cancelled')),
  attempt integer not null default 0 check (attempt >= 0),
  max_attempts integer not null check (max_attempts >= 1),
  -- Fencing token of the current attempt: heartbeat, logs and complete must
  -- carry it, so a runner whose lease moved on cannot write.
  lease_id uuid,
  worker_id uuid references workers (id) on delete set null,
  lease_expires_at timestamptz,
  allow_failure boolean not null default false,
  timeout_s integer not null check (timeout_s > 0),
  cancel_requested boolean not null default false,
  exit_code integer,
  error text,
  -- A failed-only rerun keeps a successful task's outcome; this names the task
  -- it was copied from (its logs and attempts stay there).
  copied_from uuid references tasks (id) on delete set null,
  -- Copied from the job so a claim can take the oldest job's task from one
  -- index without joining jobs.
  job_created_at timestamptz not null,
  created_at timestamptz not null default now(),
  queued_at timestamptz,
  started_at timestamptz,
  finished_at timestamptz,
  unique (job_id, name),
  check (attempt <= max_attempts),
  check (state <> 'running' or (lease_id is not null and lease_expires_at is not null))
);

-- Claim: queued tasks, oldest job first.
create index tasks_claimable on tasks (job_created_at, position) where state = 'queued';
-- Sweep: leases that expired.
create index tasks_leases on tasks (lease_expires_at) where state = 'running';
-- Settle and promotion: "is anything left" as an indexed EXISTS on the job.
create index tasks_unfinished on tasks (job_id) where state in ('waiting', 'queued', 'running');

-- The DAG's edges: task_id needs need_id. Promotion looks up a finished task's
-- children by need_id, so no per-child counter becomes a hot row on fan-in.
create table task_needs (
  task_id uuid not null references tasks (id) on delete cascade,
  need_id uuid not null references tasks (id) on delete cascade,
  primary key (task_id, need_id),
  check (task_id <> need_id)
);
create index task_needs_need on task_needs (need_id);
create index tasks_copied_from on tasks (copied_from) where copied_from is not null;

create table task_attempts (
  task_id uuid not null references tasks (id) on delete cascade,
  attempt integer not null check (attempt >= 1),
  lease_id uuid not null unique,
  worker_id uuid references workers (id) on delete set null,
  -- What the runner reported, and the task state that completion produced, so
  -- a repeated completion with the same lease answers the same thing.
  reported_outcome text,
  result_state text,
  -- Null while the attempt runs.
  outcome text
    constraint task_attempts_outcome_check
    check (outcome in ('success', 'failed', 'cancelled', 'lost', 'timed_out')),
  transient boolean,
  exit_code integer,
  error text,
  log_size bigint not null default 0 check (log_size >= 0),
  started_at timestamptz not null default now(),
  finished_at timestamptz,
  primary key (task_id, attempt)
);
create index task_attempts_worker on task_attempts (worker_id) where worker_id is not null;

create table task_outputs (
  task_id uuid not null references tasks (id) on delete cascade,
  name text not null check (name ~ '^[A-Za-z_][A-Za-z0-9_]*$'),
  value text not null,
  primary key (task_id, name)
);

-- Logs are stored as the runner sent them, per attempt, keyed by byte offset,
-- so a retried upload of the same chunk is recognised and stored once.
create table log_chunks (
  task_id uuid not null,
  attempt integer not null,
  byte_offset bigint not null check (byte_offset >= 0),
  -- Bytes of the runner's text this chunk stands for; `data` is what is kept
  -- of them, with secret values masked, so its length can differ.
  size integer not null check (size >= 0),
  data bytea not null,
  created_at timestamptz not null default now(),
  primary key (task_id, attempt, byte_offset),
  foreign key (task_id, attempt) references task_attempts (task_id, attempt) on delete cascade
);

create table project_secrets (
  project_id text not null references projects (id) on delete cascade,
  name text not null check (name ~ '^[A-Za-z_][A-Za-z0-9_]*$'),
  value_enc text not null,
  created_at timestamptz not null default now(),
  updated_at timestamptz not null default now(),
  primary key (project_id, name)
);

-- Commit statuses to post to the forge, written in the same transaction as the
-- job state change they report; delivered after commit and retried by the
-- sweep. Only the newest row of a job is ever posted: older undelivered ones
-- are superseded, so a late delivery never overwrites a newer state.
create table status_outbox (
  id bigint generated always as identity primary key,
  job_id uuid not null references jobs (id) on delete cascade,
  state text not null
    constraint status_outbox_state_check
    check (state in ('pending', 'success', 'failure', 'error', 'warning')),
  description text not null,
  attempts integer not null default 0,
  next_attempt_at timestamptz not null default now(),
  -- A deliverer holds the job's newest row while it calls the forge; no other
  -- row of the job is claimed meanwhile, so deliveries of a job never overlap.
  claimed_until timestamptz,
  result text
    constraint status_outbox_result_check
    check (result in ('delivered', 'superseded', 'gave_up')),
  done_at timestamptz,
  last_error text,
  created_at timestamptz not null default now(),
  check ((result is null) = (done_at is null))
);
create index status_outbox_due on status_outbox (next_attempt_at) where result is null;
create index status_outbox_job on status_outbox (job_id, id) where result is null;
