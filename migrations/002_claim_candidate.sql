-- The claim's choice of task, as a function so that its plan never depends on
-- the table's statistics. Queued tasks come and go in bursts, so the planner's
-- estimate of how many there are is usually far too low; with a low estimate
-- it reads every queued task and sorts them for each claim (measured: 5.5 ms
-- per claim with 1,500 queued) instead of walking tasks_claimable in order and
-- stopping at the first task it can lock. With sorting disabled the ordered
-- index walk is the only plan left. PL/pgSQL also keeps the plan for the
-- session, so the claim is not re-planned on every call without a client-side
-- prepared statement (which would pin a session behind RDS Proxy).
--
-- Answers the id of the oldest job's queued task whose labels are all among
-- p_labels, locked FOR UPDATE for the calling transaction, or null. SKIP
-- LOCKED passes over tasks other claimers hold. The job's state is one
-- primary-key probe per candidate.
create function conductor_claim_candidate(p_labels text[]) returns uuid
language plpgsql volatile
set enable_sort = off
set enable_bitmapscan = off
as $$
declare
  v_id uuid;
begin
  select t.id into v_id
    from tasks t
   where t.state = 'queued'
     and t.labels <@ p_labels
     and (select j.state from jobs j where j.id = t.job_id) = 'running'
   order by t.job_created_at, t.position
   limit 1
   for update of t skip locked;
  return v_id;
end
$$;
