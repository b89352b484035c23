-- GitLab as a third forge (issue #55): a project, a session and a sign-in's
-- state may name it. The constraints are replaced, not edited in place: each
-- still lists every forge lib/states.ts FORGES names.
alter table projects drop constraint projects_forge_check;
alter table projects add constraint projects_forge_check
  check (forge in ('github', 'gitea', 'gitlab'));

alter table sessions drop constraint sessions_forge_check;
alter table sessions add constraint sessions_forge_check
  check (forge in ('github', 'gitea', 'gitlab'));

alter table oauth_states drop constraint oauth_states_forge_check;
alter table oauth_states add constraint oauth_states_forge_check
  check (forge in ('github', 'gitea', 'gitlab'));

-- A GitLab project's repo is its full path, with subgroups between the group
-- and the name (`group/sub/name`); GitHub's and Gitea's stay owner/name.
alter table projects drop constraint projects_repo_check;
alter table projects add constraint projects_repo_check check (
  case when forge = 'gitlab' then repo ~ '^[^/[:space:]]+(/[^/[:space:]]+)+$'
       else repo ~ '^[^/[:space:]]+/[^/[:space:]]+$' end);
