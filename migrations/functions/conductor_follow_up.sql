-- The follow-up of a finished task (lib/scheduler/progress.ts, and the success
-- procedure conductor_finish_success). Its one home: change it here
-- (docs/database.md, "Functions").
--
-- Run in a transaction opened after the task's outcome committed: it settles
-- the job if nothing is left (conductor_settle) and answers whether a child
-- of the task is waiting with every need finished (conductor_child_ready,
-- promoteReady's candidates). Most calls find neither (siblings still
-- running, no children) and write nothing. A sibling that commits later runs
-- its own and sees this one's outcome. A job with a child to promote is not
-- finished, so the settle and the promotion never both have work.
-- fail_fast: a failed fail_fast expansion with siblings to stop
-- (conductor_fail_fast_due); its siblings are unfinished, so the settle found
-- nothing to do. conditional: a waiting task with `when: always` or
-- `on_failure` whose needs are all final may sit past a skipped task, out of
-- this walk of the finished task's children (the partial index
-- tasks_waiting_conditional, migrations/012). The caller sends a job with
-- promote, fail_fast or conditional to the promotion transaction.
--
-- History: a statement in lib/scheduler/progress.ts (issue #8); a function of
-- its own since issue #36, so that conductor_finish_success runs the same.

create or replace function conductor_follow_up(
  p_job uuid, p_task uuid,
  out job_state text, out promote boolean, out fail_fast boolean, out conditional boolean
)
language plpgsql volatile
-- Keyed reads only (the job's waiting tasks, their needs), whatever the
-- statistics say, like the functions it calls (issue #36).
set enable_seqscan = off
set enable_hashjoin = off
set enable_mergejoin = off
as $$
begin
  select conductor_settle(p_job), conductor_child_ready(p_task), conductor_fail_fast_due(p_task),
         exists (select 1 from tasks c
                  where c.job_id = p_job and c.state = 'waiting' and c.run_when <> 'on_success'
                    and not exists (
                          select 1 from task_needs n join tasks p on p.id = n.need_id
                           where n.task_id = c.id
                             and p.state in ('waiting', 'queued', 'running', 'blocked')))
    into job_state, promote, fail_fast, conditional;
end
$$;
