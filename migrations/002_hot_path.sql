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

-- Workers are never deleted (revoking keeps the row), so the foreign keys from
-- tasks and attempts to workers protected nothing a claim does not already
-- guarantee (it writes the authenticated worker's id), while each claim paid
-- for them: the check locks the worker row (a WAL record and a dirtied page
-- per claim, and a shared lock every claim of that worker queues on). The
-- index on task_attempts.worker_id served only the ON DELETE SET NULL, and
-- nothing looks an attempt up by lease_id without its task_id, which the
-- primary key already leads with. Each dropped index is one insert less per
-- claim.
alter table tasks drop constraint tasks_worker_id_fkey;
alter table task_attempts drop constraint task_attempts_worker_id_fkey;
drop index task_attempts_worker;
alter table task_attempts drop constraint task_attempts_lease_id_key;

-- Whether a finished task has a child that is waiting with every need
-- finished: the follow-up's question after each completion. Task states are
-- looked up by primary key, edge by edge, and the walk over a child's needs
-- stops at the first unfinished one. Without statistics (a new database, or a
-- burst of new tasks) the planner chose to read the edges in the order they
-- were inserted, which is the order tasks finish in, or to scan every task;
-- either made a fan-in of 1,000 parents cost O(n) per parent. With those plans
-- disabled only the keyed walk is left. STABLE: it reads with the snapshot of
-- the statement that calls it.
create function conductor_child_ready(p_parent uuid) returns boolean
language plpgsql stable
set enable_seqscan = off
set enable_bitmapscan = off
set enable_hashjoin = off
set enable_mergejoin = off
as $$
begin
  return exists (
    select 1
      from task_needs e
      join tasks w on w.id = e.task_id
     where e.need_id = p_parent
       and w.state = 'waiting'
       and not exists (
             select 1
               from task_needs n
               join tasks p on p.id = n.need_id
              where n.task_id = w.id
                and p.state in ('waiting', 'queued', 'running')));
end
$$;
