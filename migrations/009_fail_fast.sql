-- fail_fast (issue #34): a failed expansion of a matrix task whose pipeline
-- sets `fail_fast: true` cancels its siblings, the other expansions of the
-- same base task still waiting, queued or running. The flag is the
-- compiler's, copied onto each expansion; tasks stored before it never set it.
alter table tasks add column fail_fast boolean not null default false;

-- Whether a finished task's follow-up has siblings to stop: the task failed
-- (not allowed to), is fail_fast, and a sibling is still unfinished and not
-- already told to stop. Part of every completion's one-statement follow-up
-- (lib/scheduler/progress.ts), so it answers from the task's primary key for
-- every other outcome, and otherwise walks only the job's unfinished tasks
-- (tasks_unfinished).
create function conductor_fail_fast_due(p_task uuid) returns boolean
language plpgsql stable
set enable_seqscan = off
set enable_bitmapscan = off
as $$
declare
  v_job uuid;
  v_base text;
begin
  select t.job_id, t.base_name into v_job, v_base
    from tasks t
   where t.id = p_task and t.fail_fast and t.state = 'failed' and not t.allow_failure;
  if v_job is null then
    return false;
  end if;
  return exists (
    select 1 from tasks s
     where s.job_id = v_job and s.base_name = v_base and s.id <> p_task
       and s.state in ('waiting', 'queued', 'running')
       and not (s.state = 'running' and s.cancel_requested));
end
$$;
