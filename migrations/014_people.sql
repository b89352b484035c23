-- People (issue #31): sign-in with the forge, sessions kept here so that
-- signing out takes effect at once, what the forge said each person may do
-- (asked again after five minutes), and the audit of every action.

-- A signed-in browser. The cookie carries a random id signed by the server
-- (lib/pages/access.ts); only the id's SHA-256 is kept, so a copy of this
-- table opens no session. A cookie whose row is gone (signed out, revoked)
-- opens nothing. `id` is what the audit rows name.
create table sessions (
  id uuid primary key default gen_random_uuid(),
  token_hash bytea not null unique,
  kind text not null check (kind in ('admin', 'forge')),
  forge text check (forge in ('github', 'gitea')),
  login text,
  created_at timestamptz not null default now(),
  expires_at timestamptz not null,
  check ((kind = 'forge') = (forge is not null and login is not null))
);
create index sessions_expires on sessions (expires_at);

-- A sign-in on its way through the forge: the state (hashed) and the PKCE
-- verifier, used once (deleted when the forge sends the person back).
create table oauth_states (
  state_hash bytea primary key,
  forge text not null check (forge in ('github', 'gitea')),
  code_verifier text not null,
  next text not null,
  created_at timestamptz not null default now()
);

-- What the forge answered about a person on a project's repository, with the
-- time it answered: older than five minutes, it is asked again.
create table person_permissions (
  project_id text not null references projects (id) on delete cascade,
  forge text not null,
  login text not null,
  repo text not null,
  permission text not null check (permission in ('none', 'read', 'write', 'admin')),
  checked_at timestamptz not null,
  primary key (project_id, forge, login)
);

-- Who did what, when, from which session. `actor` is `@login` or
-- `admin token`; the session may be gone by the time the row is read.
create table audit_events (
  id bigint generated always as identity primary key,
  project_id text not null references projects (id) on delete cascade,
  job_id uuid references jobs (id) on delete set null,
  at timestamptz not null default now(),
  actor text not null,
  actor_forge text,
  session_id uuid,
  action text not null,
  detail text not null default ''
);
create index audit_events_project on audit_events (project_id, id desc);
create index audit_events_job on audit_events (job_id, id desc) where job_id is not null;
