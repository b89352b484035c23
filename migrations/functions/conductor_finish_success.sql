-- A success and its follow-up in one call (lib/scheduler/complete.ts: the
-- library's completeTask and the runner route's completion). Its one home:
-- change it here (docs/database.md, "Functions").
--
-- A procedure, called on its own (CALL, never inside a transaction block):
-- 1. When p_hash is given, the worker is the token's (conductor_worker_by_token:
--    no worker, and nothing else happens; worker_id answers null).
-- 2. The success, as conductor_complete_success records it (task, attempt and
--    outputs), under the worker's current lease. Nothing matched (a repeat, a
--    stale or foreign lease, a cancel flag): job_id answers null, nothing
--    else happens, and the caller sorts it out in a transaction.
-- 3. COMMIT: the outcome is durable, and visible to every snapshot taken
--    from now on.
-- 4. The follow-up (conductor_follow_up) in a new transaction, whose snapshot
--    is taken after that commit: the same guarantee as the follow-up sent as
--    a statement of its own after the success's reply (of two last siblings
--    finishing together, at least one sees both), one round trip fewer
--    (issue #36). Its answers go back with the job's id.
-- An error in 2 rolls back 1 and 2. An error in 4 (a 40001 of the settle, a
-- lock_timeout, a connection lost) comes after the commit: the outcome
-- stands, and the caller, which cannot tell where the call failed, takes
-- the general completion, which answers a repeat with the state recorded
-- and runs the follow-up again (lib/scheduler/complete.ts).
-- No SET clause: a procedure that has one cannot commit; the functions it
-- calls carry their own lock_timeout.
--
-- History: issue #36.

create or replace procedure conductor_finish_success(
  p_task uuid, p_lease uuid, p_worker uuid, p_hash bytea,
  p_error text, p_exit_code integer, p_transient boolean, p_outputs jsonb,
  inout worker_id uuid default null, inout job_id uuid default null,
  inout job_state text default null, inout promote boolean default null,
  inout fail_fast boolean default null, inout conditional boolean default null
)
language plpgsql
as $$
begin
  worker_id := p_worker;
  if p_hash is not null then
    select w.id into worker_id from conductor_worker_by_token(p_hash, p_lease) w;
    if worker_id is null then
      return;
    end if;
  end if;
  job_id := conductor_complete_success(p_task, p_lease, worker_id, p_error, p_exit_code,
                                       p_transient, p_outputs);
  if job_id is null then
    return;
  end if;
  commit;
  select f.job_state, f.promote, f.fail_fast, f.conditional
    into job_state, promote, fail_fast, conditional
    from conductor_follow_up(job_id, p_task) f;
end
$$;
