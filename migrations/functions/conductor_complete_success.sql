-- A successful outcome (lib/scheduler/complete.ts). Its one home: change it
-- here (docs/database.md, "Functions").
--
-- Records a success under the task's current lease, unless the task was
-- flagged for cancel: task, attempt and outputs in one commit. Answers the
-- job's id, or null when nothing matched (a stale or foreign lease, a repeat,
-- a cancel flag), which the caller handles in a transaction. A cancel or a
-- lease expiry that commits after this statement's snapshot makes the UPDATE
-- fail with 40001; the caller runs it again, and it then matches nothing.
--
-- History: migration 002; issue #36 (sequential scans off).

create or replace function conductor_complete_success(
  p_task uuid, p_lease uuid, p_worker uuid,
  p_error text, p_exit_code integer, p_transient boolean, p_outputs jsonb
) returns uuid
language plpgsql volatile
set lock_timeout = '5s'
-- Each statement finds its rows by primary key. Without this, a plan made
-- while task_attempts was analysed empty (a new database's, until migration
-- 019 stopped analysing empty tables) updated the attempt through a
-- sequential scan of the whole table, cached as the table grew: every
-- success read every attempt ever made
-- (issue #36, found with the bench's per-table counters).
set enable_seqscan = off
as $$
declare
  v_job uuid;
  v_attempt integer;
begin
  update tasks
     set state = 'success', lease_expires_at = null, finished_at = now(),
         error = p_error, exit_code = p_exit_code
   where id = p_task and state = 'running' and lease_id = p_lease and worker_id = p_worker
     and not cancel_requested
  returning job_id, attempt into v_job, v_attempt;
  if v_job is null then
    return null;
  end if;

  update task_attempts
     set outcome = 'success', reported_outcome = 'success', result_state = 'success',
         transient = p_transient, exit_code = p_exit_code, error = p_error, finished_at = now()
   where task_id = p_task and attempt = v_attempt;

  if p_outputs <> '{}' then
    insert into task_outputs (task_id, name, value)
    select p_task, o.key, o.value from jsonb_each_text(p_outputs) o
    on conflict (task_id, name) do update set value = excluded.value;
  end if;

  return v_job;
end
$$;
