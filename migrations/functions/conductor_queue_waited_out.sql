-- Whether a queued task has waited for a worker longer than its
-- queue_timeout: the sweep (lib/scheduler/sweep.ts) asks it when it finds
-- its candidates, and again under the task's row lock before it fails one
-- (issue #47). Its one home: change it here (docs/database.md, "Functions").
--
-- A task the claim holds back for its concurrency group waits for the
-- group, not for a worker: the rule is the claim's own, asked of the
-- claim's functions (conductor_task_group_open, conductor_job_group_open).
-- Before #47 the sweep kept a copy that compared the running count with the
-- task's own limit instead of the smallest of its and the holders' limits,
-- and failed a task that a limit-1 holder kept waiting ("no worker … claimed
-- it").
--
-- Nor does the wait for the group count: the clock starts at the later of
-- queued_at and the group's last change, a slot taken in it
-- (concurrency_groups.taken_at, written by each claim that takes one,
-- migrations/017) or one of its tasks (a job's group: its jobs) finishing.
-- A task becomes its group's claimable head at one of those moments (the
-- head before it was claimed or ended, a holder ended), so before #47 the
-- first sweep after a long group wait failed the new head at once. A change
-- in the group while the task could already be claimed (a second holder
-- ending) restarts its clock too: the wait for a worker is never counted
-- shorter than it was. A job of a group of its own that holds its slot
-- counts from the group's last slot taken (at or after its own), so its
-- tasks queued before it held the slot do not count that wait either.
--
-- The group's tasks that finished within the timeout are found through
-- their jobs (running, or finished within the timeout: a task ends before
-- its job), as no index keys finished tasks by group; the cheaper checks go
-- first, and only a task past queued_at + queue_timeout at the head of an
-- open group gets that far.
--
-- STABLE: read in the caller's snapshot (the sweep's REPEATABLE READ).
-- History: issue #47 (from the sweep's query, which had its own copy of the
-- group rule and counted from queued_at).

create or replace function conductor_queue_waited_out(p_task tasks)
returns boolean
language plpgsql stable
as $$
declare
  v_job jobs;
  v_cut timestamptz := now() - make_interval(secs => p_task.queue_timeout_s);
begin
  if p_task.state <> 'queued' or p_task.queued_at >= v_cut then
    return false;
  end if;
  select * into v_job from jobs j where j.id = p_task.job_id;
  if v_job.concurrency_key is not null then
    if not v_job.group_held
       and not conductor_job_group_open(v_job.concurrency_key, v_job.concurrency_limit,
                                        v_job.created_at, v_job.id) then
      return false;
    end if;
    if exists (select 1 from concurrency_groups g
                where g.key = 'job:' || v_job.concurrency_key and g.taken_at >= v_cut) then
      return false;
    end if;
    if not v_job.group_held
       and exists (select 1 from jobs o
                    where o.concurrency_key = v_job.concurrency_key and o.finished_at >= v_cut) then
      return false;
    end if;
  end if;
  if p_task.concurrency_key is not null then
    if not conductor_task_group_open(p_task.concurrency_key, p_task.concurrency_limit,
                                     p_task.job_created_at, p_task.position) then
      return false;
    end if;
    if exists (select 1 from concurrency_groups g
                where g.key = 'task:' || p_task.concurrency_key and g.taken_at >= v_cut) then
      return false;
    end if;
    if exists (select 1 from jobs j join tasks o on o.job_id = j.id
                where j.state = 'running'
                  and o.concurrency_key = p_task.concurrency_key and o.finished_at >= v_cut)
       or exists (select 1 from jobs j join tasks o on o.job_id = j.id
                   where j.finished_at >= v_cut
                     and o.concurrency_key = p_task.concurrency_key and o.finished_at >= v_cut) then
      return false;
    end if;
  end if;
  return true;
end
$$;
