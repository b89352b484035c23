-- A runner's heartbeat (lib/scheduler/complete.ts, heartbeat). Its one home:
-- change it here (docs/database.md, "Functions").
--
-- Extends the lease of the task's running attempt when the worker holds it
-- under p_lease; answers the new expiry and whether the task was flagged for
-- cancel, or no row when nothing matched (a lease that moved on, a task
-- that ended or never existed: the caller looks the task up to say which).
-- A completion or a lease takeover that commits after this statement's
-- snapshot makes the update raise 40001; the caller runs it again, and it
-- then matches nothing.
--
-- A function so that its plan is keyed whatever the table's statistics say:
-- as a plain statement, on a `tasks` analysed while empty, a session planned
-- it as a sequential scan and kept that plan as the table grew (issue #36,
-- test/e2e/runner-plans.test.ts).
--
-- History: a statement in lib/scheduler/complete.ts; a function since issue
-- #36.

create or replace function conductor_heartbeat(
  p_task uuid, p_lease uuid, p_worker uuid, p_lease_s integer
)
returns table (lease_expires_at timestamptz, cancel_requested boolean)
language plpgsql volatile
set enable_seqscan = off
as $$
begin
  return query
  update tasks t
     set lease_expires_at = now() + make_interval(secs => p_lease_s)
   where t.id = p_task and t.state = 'running' and t.lease_id = p_lease and t.worker_id = p_worker
  returning t.lease_expires_at, t.cancel_requested;
end
$$;
