-- The GitHub App (issue #53, lib/forge/github/app.ts, lib/app/github-app.ts).
-- A project with github_app is served by the app: its deliveries come to the
-- app's webhook and are verified with the app's secret, its API calls use an
-- installation token, and its jobs report as check runs.
alter table projects add column github_app boolean not null default false;

-- The installations of the app, as its `installation` events say them.
create table github_installations (
  id bigint primary key check (id > 0),
  -- The user or organisation it is installed on.
  account text not null,
  suspended boolean not null default false,
  created_at timestamptz not null default now(),
  updated_at timestamptz not null default now()
);

-- The repositories each installation lets the app serve (`installation` and
-- `installation_repositories` events). A repository is in one installation of
-- the app at most; `repo_key` is its full name in lower case, as projects are
-- found (lib/app/projects.ts findProjectByRepo).
create table github_installation_repositories (
  repo_key text primary key,
  repo text not null,
  installation_id bigint not null references github_installations (id) on delete cascade,
  created_at timestamptz not null default now()
);
create index github_installation_repositories_installation
  on github_installation_repositories (installation_id);

-- The check run a job reports as (one per job), created by the first status
-- delivery of the job and updated by the next ones.
create table github_check_runs (
  job_id uuid primary key references jobs (id) on delete cascade,
  check_run_id bigint not null,
  created_at timestamptz not null default now()
);
create index github_check_runs_run on github_check_runs (check_run_id);
