-- The claim (lib/scheduler/claim.ts and lib/app/claim.ts, one statement at
-- REPEATABLE READ). Its one home: change it here; lib/db/migrate.ts applies
-- this file after the numbered migrations whenever it changes
-- (docs/database.md, "Functions").
--
-- Claims for a worker the oldest job's queued task whose labels are all among
-- p_labels, under a new attempt and the caller's lease id; answers the task as
-- it now runs and what the runner needs from its job and project.
-- * The worker's registration decides the pool (trusted or not) and the
--   projects it may claim from; an id that names no worker claims nothing.
-- * The same claim again (same worker and Idempotency-Key p_key, its reply
--   lost) is answered the attempt it started while its lease lives.
-- * An ephemeral worker has one claim.
-- * An expired lease is taken over first, in the order leases ran out, so a
--   long queue cannot starve a lost runner's task.
-- * A task of a concurrency group is claimable only at the head of its
--   group's queue with a free slot; a job of a group of its own starts only
--   at the head of the group's jobs, with a free slot.
-- SKIP LOCKED passes over tasks other claimers hold right now; a task another
-- claimer took and committed after this statement's snapshot raises 40001 when
-- it is locked, and the caller claims again with a fresh snapshot.
-- To keep claimers from all walking into the head that one of them just took,
-- the walk (issue #36) locks the first task whose row no transaction
-- concurrent with this snapshot touched (conductor_claim_fresh), and tries
-- the touched ones it passed over only when it finds none. See "The walk"
-- below.
-- Nothing claimable: no row, and (for a worker that is not ephemeral) nothing
-- written.
--
-- Not covered: a claim statement that reaches the server only after its
-- client gave up on it and its give-back found nothing (a frozen connection
-- whose bytes arrive after the thaw) commits a lease nobody holds; a repeat
-- with its key still gets it, else it expires and is taken over.
--
-- History: migrations 002 (first), 003 (pools), 004 (takeover), 007 (scope,
-- ephemeral workers, keyed claims), 013 (concurrency groups), 017 (a group's
-- row written by each slot taken); issue #36 (the walk's untouched rows first;
-- the group checks in functions of their own; sequential scans off); issue
-- #47 (the ephemeral claim and the group slots hold at READ COMMITTED). Changing the
-- arguments or the result type needs a numbered migration that drops the old
-- function first (`create or replace` cannot change them).

create or replace function conductor_claim(
  p_worker uuid, p_labels text[], p_lease_s integer, p_lease_id uuid, p_key text
)
returns setof conductor_claimed
language plpgsql volatile
set enable_sort = off
set enable_bitmapscan = off
-- Every read here starts from a key (the worker, the claim key, a job, a
-- project) or walks an index in its order: a sequential scan is never the
-- plan meant, and one chosen from statistics taken while a table was empty
-- (a new database's, until migration 019 stopped analysing empty tables; an
-- analyse by hand or after a purge) stays in the session's cached plan as
-- the table grows (issue #36: the bench's claims and successes scanned all
-- of task_attempts).
set enable_seqscan = off
set lock_timeout = '5s'
-- The cursor's plan: one generic plan (an index walk of tasks_claimable) for
-- every call. Left to the default, a cursor keeps planning each call with its
-- labels as constants (review of #36: an empty claim beside 2,200 queued
-- tasks of other labels took 0.92 ms on the server against 0.72 ms generic).
set plan_cache_mode = force_generic_plan
as $$
declare
  v_worker workers;
  v_trusted boolean;
  v_id uuid;
  v_takeover boolean := false;
  v_task tasks;
  v_outputs jsonb;
  v_job_key text;
  v_snap pg_snapshot;
  v_next bigint;
  c_cand refcursor;
  v_cand uuid;
  v_fresh boolean;
  v_touched uuid[] := '{}';
begin
  select * into v_worker from workers w where w.id = p_worker;
  if not found then
    return;
  end if;
  v_trusted := not v_worker.untrusted;

  -- The same claim again (its reply was lost): the attempt it started, while
  -- its lease lives, answered as it was, and marked answered again so that
  -- no give-back of the first answer takes it from the runner now holding it.
  -- A give-back that locked the attempt first makes this update raise 40001,
  -- and the retry finds the task queued and claims anew.
  if p_key is not null then
    select t.* into v_task
      from task_attempts a
      join tasks t on t.id = a.task_id and t.lease_id = a.lease_id
     where a.worker_id = p_worker and a.claim_key = p_key
       and t.state = 'running' and t.lease_expires_at > now()
     limit 1;
    if v_task.id is not null then
      update task_attempts set repeated_at = now() where lease_id = v_task.lease_id;
    end if;
  end if;

  if v_task.id is null then
    -- An ephemeral worker has one claim; the route answers 401 after it.
    if v_worker.ephemeral and v_worker.claimed_lease is not null then
      return;
    end if;

    -- Takeover of an expired lease first, as in 004, within the scope.
    select t.id into v_id
      from tasks t
     where t.state = 'running'
       and t.lease_expires_at < now()
       and t.attempt < t.max_attempts
       and not t.cancel_requested
       and not exists (
             select 1 from task_attempts a
              where a.task_id = t.id and a.attempt = t.attempt
                and a.started_at + make_interval(secs => t.timeout_s) < now())
       and t.trusted = v_trusted
       and t.labels <@ p_labels
       and (select j.state = 'running'
                   and (v_worker.projects is null or j.project_id = any (v_worker.projects))
              from jobs j where j.id = t.job_id)
     order by t.lease_expires_at
     limit 1
     for update of t skip locked;
    if v_id is not null then
      v_takeover := true;
      update task_attempts a
         set outcome = 'lost', result_state = 'queued', transient = true,
             error = 'lease expired: the runner stopped reporting; claimed again',
             finished_at = now()
        from tasks t
       where t.id = v_id and a.task_id = t.id and a.attempt = t.attempt;
    else
      -- The scope is checked on the job row the state is read from: a task
      -- of a project outside it is passed over like one of a job that is not
      -- running, so a scoped worker walks past other projects' queued tasks.
      -- A task of a concurrency group (migrations/013) is claimable only
      -- when it heads its group's queue (first in, first out) and the group
      -- has a free slot (conductor_task_group_open); a job of a group of its
      -- own starts only at the head of the group's jobs, with a free slot
      -- (conductor_job_group_open). Both are functions called only for a
      -- candidate that has a group: as subqueries here, every claim paid for
      -- setting up their plans, group or not (issue #36: 8-11% of a claim's
      -- server time, measured with claims of both versions taking turns).
      -- Of two claimers, the second sees the head locked
      -- (skipped; the next task of the group is not the head) or, once the
      -- first committed, its row changed (40001, and the retry counts the
      -- new holder): two claimers never both take the last slot.
      --
      -- The walk (issue #36). Of 16 claimers that took their snapshots
      -- together, all see the same head task queued; the first to lock it
      -- commits, and every other one that locks it after that raises 40001
      -- and starts over. That task's row shows it: its xmax is the claimer's
      -- transaction, which had not ended when our snapshot was taken. So the
      -- walk reads the candidates in claim order (a cursor, one row a fetch)
      -- and locks (SKIP LOCKED) the first whose xmax is no such transaction
      -- (conductor_claim_fresh: not an xid running at our snapshot, nor one
      -- assigned after it): xmax zero, a transaction that ended before the
      -- snapshot (committed: then it only locked the row, else we would see
      -- its new version; or aborted: a claim that rolled back), a multixact
      -- id (ahead of the xid counter, or behind the snapshot's xmax without
      -- naming an xid running at it). Locking such a row
      -- raises no 40001 unless yet another claimer takes it between our
      -- snapshot and our lock.
      -- The touched candidates it passed over are kept, in claim order, and
      -- locked in turn only when no untouched one could be, as the walk did
      -- before #36; so no row is starved: a row a concurrent transaction
      -- only locked (FOR UPDATE, SKIP LOCKED, a foreign key's KEY SHARE) and
      -- let go, a claim that rolled back after our snapshot, a multixact id
      -- that happens to equal such an xid.
      -- Oldest-first: a row locked by a transaction still running is passed
      -- over by SKIP LOCKED, as before. A row that a concurrent transaction
      -- locked without updating it and that ended after our snapshot (a
      -- claim that rolled back, a share lock let go) is free, but touched: a
      -- claim whose snapshot was taken before that end may take a younger
      -- task. A claim whose snapshot follows it takes the row first (both
      -- tested), also when the row's xmax is a multixact id just ahead of
      -- the xid counter (issue #47, test/scheduler/claim-multixact.test.ts).
      -- Each lock is its own statement on one row by id; at REPEATABLE READ
      -- it raises 40001 on a row changed after the snapshot exactly as the
      -- single statement's FOR UPDATE did. It checks `state = 'queued'` again
      -- for a session at READ COMMITTED (a connection URL's `options` can set
      -- it): there the lock reads the row's newest version, which another
      -- claimer may have set running and committed since the cursor read it,
      -- and without the check the task was taken twice (found in review; the
      -- single statement's FOR UPDATE re-checked its conditions itself). The candidates' conditions are
      -- read once, in the snapshot; the walk stops at the first row locked.
      -- An empty claim reads the partial index once (a first version read
      -- it twice, one query a pass: measured 1.5x the time of a claim walking
      -- past 1,000 tasks of other labels), locks nothing and takes no xid
      -- (reading the snapshot assigns none), so it still writes nothing.
      v_snap := pg_current_snapshot();
      v_next := pg_snapshot_xmax(v_snap)::text::bigint;
      open c_cand for
      select t.id, conductor_claim_fresh(t.xmax, v_snap, v_next)
        from tasks t
       where t.state = 'queued'
         and t.trusted = v_trusted
         and t.labels <@ p_labels
         and (select j.state = 'running'
                     and (v_worker.projects is null or j.project_id = any (v_worker.projects))
                     and (j.concurrency_key is null or j.group_held
                          or conductor_job_group_open(j.concurrency_key, j.concurrency_limit, j.created_at, j.id))
                from jobs j where j.id = t.job_id)
         and (t.concurrency_key is null
              or conductor_task_group_open(t.concurrency_key, t.concurrency_limit, t.job_created_at, t.position))
       order by t.job_created_at, t.position;
      loop
        fetch c_cand into v_cand, v_fresh;
        exit when not found;
        if v_fresh then
          select t.id into v_id from tasks t where t.id = v_cand and t.state = 'queued' for update skip locked;
          exit when v_id is not null;
        else
          v_touched := v_touched || v_cand;
        end if;
      end loop;
      close c_cand;
      foreach v_cand in array v_touched loop
        exit when v_id is not null;
        select t.id into v_id from tasks t where t.id = v_cand and t.state = 'queued' for update skip locked;
      end loop;
      if v_id is null then
        return;
      end if;
    end if;

    -- The ephemeral worker's one claim. Two claims of one ephemeral token at
    -- once: the second to write this row raises 40001 (REPEATABLE READ), and
    -- its retry sees claimed_lease set and claims nothing. At READ COMMITTED
    -- the second writer waits for the first, then finds the row's newest
    -- version with claimed_lease set and writes nothing: it raises 40001 as
    -- REPEATABLE READ would (a takeover above has already written the lost
    -- attempt, which must not stay), and its retry claims nothing (issue
    -- #47; before, it wrote over the first and claimed a second task).
    -- It is seen now too: the token check's `seen` leaves this row to us.
    if v_worker.ephemeral then
      update workers set claimed_lease = p_lease_id, last_seen_at = now()
       where id = p_worker and claimed_lease is null;
      if not found then
        raise exception 'ephemeral worker % has made its one claim', p_worker
          using errcode = 'serialization_failure';
      end if;
    end if;

    -- A takeover is a requeue and a claim at once: queued_at restarts as on
    -- any requeue, so if this claim is given back (releaseClaim) the queue
    -- timeout counts from now, not from when the task was first queued.
    update tasks t
       set state = 'running',
           attempt = t.attempt + 1,
           lease_id = p_lease_id,
           worker_id = p_worker,
           lease_expires_at = now() + make_interval(secs => p_lease_s),
           started_at = coalesce(t.started_at, now()),
           queued_at = case when v_takeover then now() else t.queued_at end
     where t.id = v_id
    returning t.* into v_task;

    insert into task_attempts (task_id, attempt, lease_id, worker_id, claim_key)
    values (v_task.id, v_task.attempt, v_task.lease_id, p_worker, p_key);

    -- A slot taken in a task's group writes the group's row
    -- (migrations/017): the holders were counted in this statement's
    -- snapshot, and another claimer may have counted them in an older or
    -- newer one (a job started in between put an older task at the head, so
    -- the two locked different tasks). The second writer of the row raises
    -- 40001 and its retry counts the first's holder. A takeover takes no new
    -- slot; a task of no group writes no row.
    -- At READ COMMITTED (issue #47) the second writer waits for the first
    -- and then writes over it; so there the holders are counted again, in a
    -- statement of its own and so a snapshot taken after the row is ours:
    -- every claimer that took a slot before us has committed, and one that
    -- counted more than the limit raises 40001 (nothing written stays; the
    -- caller's retry claims anew). At REPEATABLE READ the count would read
    -- the old snapshot, and the write's 40001 already decides.
    if v_task.concurrency_key is not null and not v_takeover then
      insert into concurrency_groups as g (key) values ('task:' || v_task.concurrency_key)
      on conflict (key) do update set version = g.version + 1, taken_at = now();
      if current_setting('transaction_isolation') in ('read committed', 'read uncommitted')
         -- our task is one of the holders now: the smallest limit is the rule's
         and (select count(*) > min(h.concurrency_limit)
                from tasks h
               where h.concurrency_key = v_task.concurrency_key and h.state = 'running') then
        raise exception 'concurrency group % has no free slot: another claim took it', v_task.concurrency_key
          using errcode = 'serialization_failure';
      end if;
    end if;

    -- The first claim of a job in a group of its own takes the job's slot,
    -- and writes the group's row as above. Of two first claims of one job,
    -- the second's update meets the first's commit (40001), and its retry
    -- finds the slot held.
    update jobs set group_held = true
     where id = v_task.job_id and concurrency_key is not null and not group_held
    returning concurrency_key into v_job_key;
    if v_job_key is not null then
      insert into concurrency_groups as g (key) values ('job:' || v_job_key)
      on conflict (key) do update set version = g.version + 1, taken_at = now();
      -- Counted again at READ COMMITTED, as a task's group above.
      if current_setting('transaction_isolation') in ('read committed', 'read uncommitted')
         and (select count(*) > min(h.concurrency_limit)
                from jobs h
               where h.concurrency_key = v_job_key and h.state = 'running' and h.group_held) then
        raise exception 'concurrency group % has no free slot: another claim took it', v_job_key
          using errcode = 'serialization_failure';
      end if;
    end if;
  end if;

  -- As in 004: the needs' outputs are final before a task is queued, and
  -- visible in this snapshot.
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
  select v_task, j.project_id, j.sha, j.ref, j.trusted and v_task.trusted, p.repo_url,
         p.forge_token_enc, v_outputs
    from jobs j
    join projects p on p.id = j.project_id
   where j.id = v_task.job_id;
end
$$;
