-- Test reports (issue #54, lib/reports/): the JUnit XML files a task's
-- runner uploads after its script, and what the control plane read from
-- them. The file's bytes go through the store (as an artifact's) and are
-- deleted once read; these rows keep the summary: one row per file with its
-- totals, and every failure it names (bounded, lib/reports/limits.ts).
create table test_reports (
  id uuid primary key default gen_random_uuid(),
  task_id uuid not null references tasks (id) on delete cascade,
  job_id uuid not null,
  project_id text not null,
  attempt integer not null check (attempt >= 1),
  -- The file's path in the checkout.
  path text not null check (length(path) between 1 and 1024),
  storage_key text not null unique,
  size bigint not null check (size >= 0),
  sha256 text not null check (sha256 ~ '^[0-9a-f]{64}$'),
  upload_id text,
  -- pending until uploaded and read; parsed, or failed (a malformed or
  -- hostile file: only its own reading fails, with `note` saying why).
  state text not null default 'pending'
    constraint test_reports_state_check check (state in ('pending', 'parsed', 'failed')),
  note text check (length(note) <= 2000),
  passed integer not null default 0 check (passed >= 0),
  failed integer not null default 0 check (failed >= 0),
  errored integer not null default 0 check (errored >= 0),
  skipped integer not null default 0 check (skipped >= 0),
  time_s double precision not null default 0,
  created_at timestamptz not null default now(),
  parsed_at timestamptz,
  -- A runner repeating a request (a lost reply) gets the same row back.
  unique (task_id, attempt, path)
);
create index test_reports_job on test_reports (job_id);

create table test_failures (
  report_id uuid not null references test_reports (id) on delete cascade,
  ordinal integer not null check (ordinal >= 0),
  task_id uuid not null,
  attempt integer not null,
  -- failed (an assertion), errored (an exception), or passed: a test that
  -- failed in an earlier attempt of the task, or in a rerun the test runner
  -- made itself (Surefire's flakyFailure), and passed here: flaky.
  kind text not null constraint test_failures_kind_check check (kind in ('failed', 'errored', 'passed')),
  flaky boolean not null default false,
  suite text not null,
  name text not null,
  classname text,
  file text,
  line integer,
  message text not null,
  primary key (report_id, ordinal)
);
create index test_failures_task on test_failures (task_id, attempt);
