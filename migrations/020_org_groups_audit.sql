-- Issue #46: `org:` concurrency groups are opt-in, and the installation has
-- an audit of its own.
--
-- A project lists the names N for which its pipelines may use the group
-- `org:N` (lower case, as group names are). A pipeline naming another is a
-- pipeline error; a group's replace_pending and cancel_running act on another
-- project's jobs only when both projects list the group (lib/scheduler/concurrency.ts).
alter table projects
  add column org_groups text[] not null default '{}'
    constraint projects_org_groups_check
    check (cardinality(org_groups) <= 50 and array_position(org_groups, null) is null);

-- What happens to the installation rather than to one project's jobs:
-- projects created, changed and deleted, workers created and revoked (with
-- their scope and pool), sessions revoked, pools. Its rows outlive what they
-- name (no foreign keys), so a deleted project's deletion stays recorded.
create table installation_events (
  id bigint generated always as identity primary key,
  at timestamptz not null default now(),
  actor text not null,
  actor_forge text,
  session_id uuid,
  action text not null,
  -- The project, worker or session the event concerns, by id.
  subject text not null default '',
  detail text not null default ''
);
