-- Schedules, manual runs with inputs, and `when:` (issue #29).
--
-- A schedule belongs to its project (not to a person or a file): a cron
-- expression read in an IANA time zone, the ref to run (null: the default
-- branch, asked of the forge when it fires) and the inputs to pass. The sweep's
-- tick fires what is due (due_at: the tick plus the schedule's jitter);
-- schedule_ticks has one row per (schedule, tick) it fired, created in the
-- same transaction as the job, so two tickers racing make one job.

alter table jobs drop constraint jobs_trigger_check;
alter table jobs add constraint jobs_trigger_check
  check (trigger in ('push', 'tag', 'pull_request', 'manual', 'rerun', 'schedule'));

-- The inputs a manual or scheduled job was given (name -> value as given),
-- checked against the pipeline's `inputs:` when it compiles; null: none.
-- schedule_name: the schedule that made the job, for `when: {schedule: [...]}`.
alter table jobs
  add column inputs jsonb,
  add column schedule_name text,
  -- The inputs the pipeline declared as this job compiled it (the Run form's fields).
  add column declared_inputs jsonb;

-- `when:` of a task: on_success (the default: every need succeeded or was
-- allowed to fail), on_failure (something it needs, directly or not, failed),
-- always (once its needs are final, whatever they ended as).
alter table tasks add column run_when text not null default 'on_success'
  constraint tasks_run_when_check check (run_when in ('on_success', 'on_failure', 'always'));

-- Follow-ups look for a waiting conditional task of the job whose needs are
-- final (it may sit past a skipped task, where the completion's own walk of
-- its children does not reach): this index keeps that probe to such tasks.
create index tasks_waiting_conditional on tasks (job_id)
  where state = 'waiting' and run_when <> 'on_success';

create table schedules (
  id uuid primary key default gen_random_uuid(),
  project_id text not null references projects (id) on delete cascade,
  name text not null
    constraint schedules_name_check check (name ~ '^[A-Za-z0-9][A-Za-z0-9_.-]{0,62}$'),
  cron text not null check (length(cron) between 1 and 200),
  timezone text not null default 'UTC' check (length(timezone) between 1 and 100),
  -- A branch name or a full ref; null: the repository's default branch.
  ref text check (length(ref) between 1 and 1024),
  inputs jsonb not null default '{}',
  enabled boolean not null default true,
  catch_up text not null default 'latest'
    constraint schedules_catch_up_check check (catch_up in ('latest', 'none')),
  -- The next tick as the cron expression says it (what people see), and when
  -- the sweep fires it: the tick plus a few seconds spread by a hash of the
  -- schedule, so that many `0 * * * *` schedules do not all fire at once.
  next_run_at timestamptz,
  due_at timestamptz,
  last_run_at timestamptz,
  last_job_id uuid references jobs (id) on delete set null,
  last_error text,
  created_at timestamptz not null default now(),
  updated_at timestamptz not null default now(),
  unique (project_id, name)
);

-- The tick's search: enabled schedules whose time has come.
create index schedules_due on schedules (due_at) where enabled;

create table schedule_ticks (
  schedule_id uuid not null references schedules (id) on delete cascade,
  tick timestamptz not null,
  job_id uuid references jobs (id) on delete set null,
  fired_at timestamptz not null default now(),
  -- Exactly one job per tick, whoever fires it.
  primary key (schedule_id, tick)
);

-- Jobs made by a schedule, found when their compile fails (last_error).
create index schedules_last_job on schedules (last_job_id) where last_job_id is not null;
