-- Whether a queued task of a concurrency group (`concurrency:` on a task,
-- migrations/013) may be claimed: the claim's walk
-- (migrations/functions/conductor_claim.sql) asks it for a candidate that has
-- a group. Its one home: change it here (docs/database.md, "Functions").
--
-- True when the group has a free slot (the limit is the smallest of this
-- task's and its running holders': least() passes over the null min of no
-- holder) and the task heads its group's queue (first in, first out: no
-- queued task of the group comes before it in claim order). Read in the
-- claim's snapshot (STABLE: the calling statement's snapshot, also at READ
-- COMMITTED). Two claimers that both count a free last slot are kept apart
-- by the group's row, which each slot taken writes (migrations/017).
--
-- History: a subquery of the claim (migrations 013, 017); a function of its
-- own since issue #36, so a claim of a task without a group does not set up
-- its plan.

create or replace function conductor_task_group_open(
  p_key text, p_limit integer, p_job_created timestamptz, p_position integer
) returns boolean
language plpgsql stable
as $$
begin
  return (select count(*) < least(p_limit, min(h.concurrency_limit))
            from tasks h
           where h.concurrency_key = p_key and h.state = 'running')
     and not exists (
           select 1 from tasks o
            where o.concurrency_key = p_key and o.state = 'queued'
              and (o.job_created_at, o.position) < (p_job_created, p_position));
end
$$;
