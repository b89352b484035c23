-- The task cycle's three steps (claim, a successful outcome, the follow-up) as
-- PL/pgSQL functions, each called in one statement that commits on its own.
--
-- (These comments were corrected after the application's sessions moved to
-- REPEATABLE READ, issue #12; docs/scheduling.md, "Isolation". The code
-- below is as first applied.)
--
-- Why functions:
-- * One round trip per step. The application's sessions run at REPEATABLE
--   READ (a startup option, lib/db/pool.ts), so every statement inside reads
--   the snapshot the calling statement took: the claim locks a task that was
--   last changed before that snapshot, so its promotion, and every output
--   committed before the promotion, are visible. A row that another
--   transaction changed and committed after the snapshot raises 40001 when a
--   statement here locks or writes it, and the caller runs the call again at
--   once with a fresh snapshot.
-- * Plans that do not depend on statistics. Queued tasks arrive in bursts and
--   new databases have none, so estimates are usually far off: the planner
--   read and sorted every queued task on each claim (5.5 ms a claim with 1,500
--   queued), and read a child's edges in insertion order, which is the order
--   parents finish in (a fan-in of 1,000 cost O(n) per parent). With sorts,
--   bitmap scans and (where every lookup starts from a key) sequential scans,
--   hash and merge joins disabled, only the keyed walks are left.
-- * PL/pgSQL keeps its plans for the session, so nothing is re-planned per
--   call without client-side prepared statements (which pin a session behind
--   RDS Proxy).
-- * lock_timeout applies to the waits inside (a cancel or sweep holding the
--   task row, a racing settle holding the job row): a statement sent on its
--   own has no transaction to carry the helper's timeouts.

-- What a claim answers: the task as it is now running, and what the runner
-- needs from its job and project. needs_outputs is {task name: {output: value}}.
create type conductor_claimed as (
  task tasks,
  project_id text,
  sha text,
  ref text,
  trusted boolean,
  repo_url text,
  forge_token_enc text,
  needs_outputs jsonb
);

-- Claims the oldest job's queued task whose labels are all among p_labels,
-- under a new attempt and lease. SKIP LOCKED passes over tasks other claimers
-- hold right now; a task another claimer took and committed after this
-- query's snapshot raises 40001 when the walk reaches it (at READ COMMITTED it
-- would be re-checked and passed over), and the caller claims again with a
-- fresh snapshot. A cancel changes the job and its queued tasks in one
-- commit, so a task this can lock belongs to a job running in its snapshot.
-- Nothing claimable: no row, and nothing written.
create function conductor_claim(p_worker uuid, p_labels text[], p_lease_s integer)
returns setof conductor_claimed
language plpgsql volatile
set enable_sort = off
set enable_bitmapscan = off
set lock_timeout = '5s'
as $$
declare
  v_id uuid;
  v_task tasks;
  v_outputs jsonb;
begin
  select t.id into v_id
    from tasks t
   where t.state = 'queued'
     and t.labels <@ p_labels
     and (select j.state from jobs j where j.id = t.job_id) = 'running'
   order by t.job_created_at, t.position
   limit 1
   for update of t skip locked;
  if v_id is null then
    return;
  end if;

  update tasks t
     set state = 'running',
         attempt = t.attempt + 1,
         lease_id = gen_random_uuid(),
         worker_id = p_worker,
         lease_expires_at = now() + make_interval(secs => p_lease_s),
         started_at = coalesce(t.started_at, now())
   where t.id = v_id
  returning t.* into v_task;

  insert into task_attempts (task_id, attempt, lease_id, worker_id)
  values (v_task.id, v_task.attempt, v_task.lease_id, p_worker);

  -- The outputs of the needs are final before a task is queued, and this
  -- query's snapshot is newer than the lock on the task, so it sees them all.
  -- (Read into a variable first: a query that branched on the task would be
  -- planned again on every call.)
  if cardinality(v_task.needs) = 0 then
    v_outputs := '{}';
  else
    select coalesce(jsonb_object_agg(
             (select n.name from tasks n where n.id = e.need_id),
             (select jsonb_object_agg(o.name, o.value)
                from task_outputs o where o.task_id = e.need_id)), '{}')
      into v_outputs
      from task_needs e
     where e.task_id = v_task.id
       and exists (select 1 from task_outputs o where o.task_id = e.need_id);
  end if;

  return query
  select v_task, j.project_id, j.sha, j.ref, j.trusted, p.repo_url, p.forge_token_enc, v_outputs
    from jobs j
    join projects p on p.id = j.project_id
   where j.id = v_task.job_id;
end
$$;

-- Records a success under the task's current lease, unless the task was
-- flagged for cancel: task, attempt and outputs in one commit. Answers the
-- job's id, or null when nothing matched (a stale or foreign lease, a repeat,
-- a cancel flag), which the caller handles in a transaction. A cancel or a
-- lease expiry that commits after this statement's snapshot makes the UPDATE
-- fail with 40001; the caller runs it again, and it then matches nothing.
create function conductor_complete_success(
  p_task uuid, p_lease uuid, p_worker uuid,
  p_error text, p_exit_code integer, p_transient boolean, p_outputs jsonb
) returns uuid
language plpgsql volatile
set lock_timeout = '5s'
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

-- Settles a running job with nothing left to do (failed if a task failed or
-- was cancelled without allow_failure, else success) and records the commit
-- status to post, for a project with a forge token and a forge URL, with a
-- summary such as "7 passed, 1 allowed to fail". Answers the new state, or
-- null when the job is not running or has work left. Of two racing settles the
-- second waits for the job row and fails with 40001 when the first commits;
-- run again with a fresh snapshot, it answers null.
create function conductor_settle(p_job uuid) returns text
language plpgsql volatile
set enable_seqscan = off
set enable_bitmapscan = off
set enable_hashjoin = off
set enable_mergejoin = off
set lock_timeout = '5s'
as $$
declare
  v_state text;
  v_project text;
begin
  update jobs j
     set state = case when exists (
                   select 1 from tasks t
                    where t.job_id = j.id and t.state in ('failed', 'cancelled') and not t.allow_failure)
                 then 'failed' else 'success' end,
         finished_at = now()
   where j.id = p_job
     and j.state = 'running'
     and not exists (
           select 1 from tasks t
            where t.job_id = j.id and t.state in ('waiting', 'queued', 'running'))
  returning j.state, j.project_id into v_state, v_project;
  if v_state is null then
    return null;
  end if;

  insert into status_outbox (job_id, state, description)
  select p_job,
         case when v_state = 'success' then 'success' else 'failure' end,
         concat_ws(', ', c.passed || ' passed',
                   nullif(c.failed, 0) || ' failed',
                   nullif(c.allowed, 0) || ' allowed to fail',
                   nullif(c.skipped, 0) || ' skipped',
                   nullif(c.cancelled, 0) || ' cancelled')
    from projects p,
         (select count(*) filter (where t.state = 'success') as passed,
                 count(*) filter (where t.state = 'failed' and not t.allow_failure) as failed,
                 count(*) filter (where t.state = 'failed' and t.allow_failure) as allowed,
                 count(*) filter (where t.state = 'skipped') as skipped,
                 count(*) filter (where t.state = 'cancelled') as cancelled
            from tasks t
           where t.job_id = p_job) c
   where p.id = v_project and p.forge_token_enc is not null and p.repo_url ~ '^https?://';
  return v_state;
end
$$;

-- Whether a finished task has a child that is waiting with every need
-- finished: the candidates of a promotion. Written as loops so that the order
-- of the walk is fixed whatever the statistics say: each child of the task,
-- then that child's needs one by one in primary-key order (random with respect
-- to the order tasks finish in), stopping at the first unfinished need. As one
-- query, statistics gathered while a job had nothing waiting led the planner
-- to scan every unfinished task of the database for each child instead, and a
-- fan-in of 1,000 parents paid O(n) per parent. Bitmap scans are off because
-- they return edges in insertion order, which is the order parents finish in,
-- so the walk would meet every finished need before an unfinished one.
-- STABLE: every query reads with the snapshot of the statement that calls it.
create function conductor_child_ready(p_parent uuid) returns boolean
language plpgsql stable
set enable_seqscan = off
set enable_bitmapscan = off
as $$
declare
  v_child uuid;
  v_need uuid;
  v_ready boolean;
begin
  for v_child in select e.task_id from task_needs e where e.need_id = p_parent loop
    if (select w.state from tasks w where w.id = v_child) = 'waiting' then
      v_ready := true;
      for v_need in select n.need_id from task_needs n where n.task_id = v_child loop
        if (select p.state from tasks p where p.id = v_need) in ('waiting', 'queued', 'running') then
          v_ready := false;
          exit;
        end if;
      end loop;
      if v_ready then
        return true;
      end if;
    end if;
  end loop;
  return false;
end
$$;

-- Workers are never deleted (revoking keeps the row), so the foreign keys from
-- tasks and attempts to workers protected nothing a claim does not already
-- guarantee (it writes the authenticated worker's id), while each claim paid
-- for them: the check locks the worker row (a WAL record and a dirtied page
-- per claim). The index on task_attempts.worker_id served only the ON DELETE
-- SET NULL, and nothing looks an attempt up by lease_id without its task_id,
-- which the primary key already leads with. Each dropped index is one insert
-- less per claim.
alter table tasks drop constraint tasks_worker_id_fkey;
alter table task_attempts drop constraint task_attempts_worker_id_fkey;
drop index task_attempts_worker;
alter table task_attempts drop constraint task_attempts_lease_id_key;
