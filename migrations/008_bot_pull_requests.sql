-- Bot pull requests (issue #28): a pull request opened or updated by a bot
-- account (Dependabot, Renovate) carries code its authors did not write: a
-- dependency's new release. It is untrusted unless the project says
-- otherwise, even from a branch of the repository. The values match
-- BOT_PULL_REQUEST_POLICIES (lib/scheduler/trust.ts).
--
-- 'untrusted' for every project, existing ones included: a bot's branch that
-- ran with every secret was the hole.
alter table projects
  add column bot_pull_requests text not null default 'untrusted'
    constraint projects_bot_pull_requests_check
    check (bot_pull_requests in ('untrusted', 'trusted'));
