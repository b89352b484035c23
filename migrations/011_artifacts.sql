-- Artifacts and caches (issue #37). The bytes live in the store (S3, or a
-- directory under .conductor/ on one machine); these rows are their
-- metadata: what a listing, a download, a restore and the limits read.
-- No foreign key ties an artifact to its job or task: retention deletes
-- jobs on its own schedule, and the row must outlive its job until the
-- object it names is deleted from the store (lib/scheduler/retention.ts).

-- What the pipeline asked of the task: {"artifacts": {...} | null, "caches": [...]}.
alter table tasks add column storage jsonb not null default '{}';

create table artifacts (
  id uuid primary key default gen_random_uuid(),
  project_id text not null references projects (id) on delete cascade,
  job_id uuid not null,
  task_id uuid not null,
  task_name text not null,
  attempt integer not null check (attempt >= 1),
  -- What a download is named: the file's path in the workspace, or
  -- "<task>.tar.gz" for a directory or several files.
  path text not null check (length(path) between 1 and 1024),
  kind text not null constraint artifacts_kind_check check (kind in ('file', 'tar')),
  storage_key text not null unique,
  size bigint not null check (size >= 0),
  sha256 text not null check (sha256 ~ '^[0-9a-f]{64}$'),
  -- Copied from the job: a trusted task never receives an untrusted one's.
  trusted boolean not null,
  -- pending from the upload URLs until the runner commits it; only ready
  -- ones are listed, downloaded and handed on.
  state text not null default 'pending'
    constraint artifacts_state_check check (state in ('pending', 'ready')),
  -- An S3 multipart upload's id; null for a single PUT.
  upload_id text,
  created_at timestamptz not null default now(),
  expires_at timestamptz not null,
  -- A runner repeating a request (a lost reply) gets the same row back.
  unique (task_id, attempt, path)
);
create index artifacts_job on artifacts (job_id);
create index artifacts_expires on artifacts (expires_at);
create index artifacts_project on artifacts (project_id) where state = 'ready';

create table caches (
  id uuid primary key default gen_random_uuid(),
  project_id text not null references projects (id) on delete cascade,
  -- "refs/heads/main" for a trusted job's writes; "untrusted:<ref>" for an
  -- untrusted job's, which no trusted job ever reads.
  scope text not null check (length(scope) between 1 and 1100),
  key text not null check (length(key) between 1 and 512),
  storage_key text not null unique,
  size bigint not null check (size >= 0),
  sha256 text not null check (sha256 ~ '^[0-9a-f]{64}$'),
  trusted boolean not null,
  state text not null default 'pending'
    constraint caches_state_check check (state in ('pending', 'ready')),
  upload_id text,
  -- The task attempt that is saving it: only it may commit a pending entry.
  task_id uuid not null,
  attempt integer not null,
  created_at timestamptz not null default now(),
  last_used_at timestamptz not null default now(),
  -- Entries are immutable, as GitHub's: a key saved in a scope stays as it
  -- was until it is deleted or evicted.
  unique (project_id, scope, key)
);
create index caches_prefix on caches (project_id, scope, key text_pattern_ops);
create index caches_lru on caches (project_id, last_used_at);

-- What each task's restore found, for the job page: a hit, a restore-key
-- hit or a miss, with the bytes restored.
create table cache_restores (
  task_id uuid not null,
  attempt integer not null,
  key text not null,
  result text not null constraint cache_restores_result_check
    check (result in ('hit', 'restore-key', 'miss')),
  matched_key text,
  size bigint not null default 0,
  created_at timestamptz not null default now(),
  primary key (task_id, attempt, key)
);
