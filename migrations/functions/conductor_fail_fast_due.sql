-- Part of the follow-up (lib/scheduler/progress.ts). Its one home: change it
-- here (docs/database.md, "Functions").
--
-- Whether a finished task's follow-up has siblings to stop (fail_fast, issue
-- #34): the task failed (not allowed to), is fail_fast, and a sibling is
-- still unfinished and not already told to stop. Part of every completion's
-- one-statement follow-up, so it answers from the task's primary key for
-- every other outcome, and otherwise walks only the job's unfinished tasks
-- (tasks_unfinished).
--
-- History: migration 009.

create or replace function conductor_fail_fast_due(p_task uuid) returns boolean
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
