-- One row per concurrency group in use (issue #30 review): the claim
-- (migrations/functions/conductor_claim.sql) writes the row of the group it
-- takes a slot in, so that two claimers whose snapshots counted the group's
-- holders differently cannot both commit: under REPEATABLE READ the second
-- writer of the row gets 40001, and its retry counts the first's holder.
-- key: 'task:<concurrency key>' for a task's group, 'job:<concurrency key>'
-- for a pipeline's; the row is made by the first claim in the group.
create table concurrency_groups (
  key text primary key,
  version bigint not null default 0,
  taken_at timestamptz not null default now()
);
