-- Whether a job of a concurrency group of its own (pipeline-level
-- `concurrency:`, migrations/013) may start: the claim's walk
-- (migrations/functions/conductor_claim.sql) asks it for a candidate whose job
-- has a group and does not hold its slot yet. Its one home: change it here
-- (docs/database.md, "Functions").
--
-- True when the group has a free slot (the limit is the smallest of this
-- job's and the holders': a pipeline saying limit 5 does not run beside a
-- holder whose pipeline said 1; least() passes over the null min of no
-- holder) and no job of the group that was created before it waits ahead
-- with a task to claim (one waiting on a block, or on its needs, does not
-- head the group). Read in the claim's snapshot (STABLE: the calling
-- statement's snapshot, also at READ COMMITTED).
--
-- History: a subquery of the claim (migrations 013, 017); a function of its
-- own since issue #36, so a claim of a task without a group does not set up
-- its plan.

create or replace function conductor_job_group_open(
  p_key text, p_limit integer, p_created timestamptz, p_job uuid
) returns boolean
language plpgsql stable
as $$
begin
  return (select count(*) < least(p_limit, min(h.concurrency_limit))
            from jobs h
           where h.concurrency_key = p_key and h.state = 'running' and h.group_held)
     and not exists (
           select 1 from jobs o
            where o.concurrency_key = p_key
              and o.state = 'running' and not o.group_held
              and (o.created_at, o.id) < (p_created, p_job)
              and exists (select 1 from tasks q where q.job_id = o.id and q.state = 'queued'));
end
$$;
