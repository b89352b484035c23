-- Changed-path filters and block steps (issue #30).
--
-- Block steps: a task with `block:` runs no script and holds no runner. Once
-- its needs are met it waits in the new task state `blocked` until someone
-- unblocks it (its fields become its outputs) or its deadline passes (the
-- sweep ends it as `on_timeout` says). `blocked` is unfinished: a job with a
-- blocked task is not settled, and a child of one is not promoted.
--
-- Changed-path filters: a task whose `changes:` no changed file matches is
-- stored `skipped` with the reason in `error`, and `path_skipped` set so that a
-- rerun makes the same decision. The job keeps what the decision was made
-- from: the diff base, the first changed files and their count, or why the
-- diff was unknown (then every task runs).

alter table tasks drop constraint tasks_state_check;
alter table tasks add constraint tasks_state_check
  check (state in ('waiting', 'queued', 'running', 'blocked', 'success', 'failed', 'skipped',
                   'cancelled'));

-- block: {prompt, fields: [{name, type, required, options}], timeoutS, onTimeout}
-- as compiled (lib/pipeline/compile.ts); null for a task with a script.
alter table tasks
  add column block jsonb,
  add column blocked_at timestamptz,
  add column block_deadline timestamptz,
  add column unblocked_by text,
  add column unblocked_at timestamptz,
  add column path_skipped boolean not null default false;

-- The sweep's search for blocks past their deadline.
create index tasks_block_deadline on tasks (block_deadline) where state = 'blocked';

-- Unfinished now includes blocked: settle and promotion ask this index.
drop index tasks_unfinished;
create index tasks_unfinished on tasks (job_id)
  where state in ('waiting', 'queued', 'running', 'blocked');

-- What a push said (the webhook): the commit before it, whether it was forced
-- or made the branch, and the files its commits list when the list is
-- complete (null when it is not: more commits than the payload carries, or a
-- commit without its lists).
alter table jobs
  add column push_before text,
  add column push_forced boolean not null default false,
  add column push_created boolean not null default false,
  add column payload_files text[],
  -- What the changes: decision was made from (lib/app/changes.ts):
  -- diff_base is `before..after`, `base...head`, or null when unknown;
  -- diff_files the first 100 changed files; diff_count how many there were;
  -- diff_note why the diff is unknown, or where the list came from.
  add column diff_base text,
  add column diff_files text[],
  add column diff_count integer,
  add column diff_note text;

-- conductor_settle as in 002, with `blocked` counted as work left.
create or replace function conductor_settle(p_job uuid) returns text
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
            where t.job_id = j.id and t.state in ('waiting', 'queued', 'running', 'blocked'))
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

-- conductor_child_ready as in 002, with a blocked need counted unfinished.
create or replace function conductor_child_ready(p_parent uuid) returns boolean
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
        if (select p.state from tasks p where p.id = v_need) in ('waiting', 'queued', 'running', 'blocked') then
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

-- Concurrency groups (`concurrency:` on a task). A task of a group carries
-- its key (`<project>/<group>`, or `org:<name>` across projects; lower case),
-- the group's limit and mode. The claim counts the group's running tasks and
-- takes only the head of its queue (below); nothing else keeps a count, so a
-- holder whose lease is taken over or expires, is cancelled or finishes frees
-- its slot by leaving `running`.
alter table tasks
  add column concurrency_group text,
  add column concurrency_key text,
  add column concurrency_limit integer check (concurrency_limit >= 1),
  add column concurrency_mode text
    constraint tasks_concurrency_mode_check
    check (concurrency_mode in ('queue', 'replace_pending', 'cancel_running'));

-- A group's holders, and its queue in claim order.
create index tasks_group_running on tasks (concurrency_key)
  where state = 'running' and concurrency_key is not null;
create index tasks_group_queued on tasks (concurrency_key, job_created_at, position)
  where state = 'queued' and concurrency_key is not null;

-- A pipeline's own group (top-level concurrency:): the whole job holds a slot
-- from its first claim (group_held) until it finishes.
alter table jobs
  add column concurrency_group text,
  add column concurrency_key text,
  add column concurrency_limit integer check (concurrency_limit >= 1),
  add column concurrency_mode text
    constraint jobs_concurrency_mode_check
    check (concurrency_mode in ('queue', 'replace_pending', 'cancel_running')),
  add column group_held boolean not null default false;

create index jobs_group on jobs (concurrency_key, created_at)
  where state = 'running' and concurrency_key is not null;

-- conductor_claim as in 007, with the group's rule in the queue's search: a
-- task of a group is claimable when it is the oldest queued task of its group
-- (job creation, then position: job number order within a project) and fewer
-- than its limit of the group's tasks are running. A takeover keeps the slot
-- its task already holds. An empty claim still writes nothing.
create or replace function conductor_claim(
  p_worker uuid, p_labels text[], p_lease_s integer, p_lease_id uuid, p_key text
)
returns setof conductor_claimed
language plpgsql volatile
set enable_sort = off
set enable_bitmapscan = off
set lock_timeout = '5s'
as $$
declare
  v_worker workers;
  v_trusted boolean;
  v_id uuid;
  v_takeover boolean := false;
  v_task tasks;
  v_outputs jsonb;
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
      -- has a free slot. Of two claimers, the second sees the head locked
      -- (skipped; the next task of the group is not the head) or, once the
      -- first committed, its row changed (40001, and the retry counts the
      -- new holder): two claimers never both take the last slot.
      select t.id into v_id
        from tasks t
       where t.state = 'queued'
         and t.trusted = v_trusted
         and t.labels <@ p_labels
         and (select j.state = 'running'
                     and (v_worker.projects is null or j.project_id = any (v_worker.projects))
                     -- A job's own group (pipeline-level concurrency:): held from
                     -- its first claim until it finishes; a job not holding it
                     -- yet starts only at the head of the group's jobs, with a
                     -- free slot.
                     and (j.concurrency_key is null or j.group_held
                          or ((select count(*) from jobs h
                                where h.concurrency_key = j.concurrency_key
                                  and h.state = 'running' and h.group_held) < j.concurrency_limit
                              and not exists (
                                    select 1 from jobs o
                                     where o.concurrency_key = j.concurrency_key
                                       and o.state = 'running' and not o.group_held
                                       and (o.created_at, o.id) < (j.created_at, j.id))))
                from jobs j where j.id = t.job_id)
         and (t.concurrency_key is null
              or ((select count(*) from tasks h
                    where h.concurrency_key = t.concurrency_key and h.state = 'running')
                    < t.concurrency_limit
                  and not exists (
                        select 1 from tasks o
                         where o.concurrency_key = t.concurrency_key and o.state = 'queued'
                           and (o.job_created_at, o.position) < (t.job_created_at, t.position))))
       order by t.job_created_at, t.position
       limit 1
       for update of t skip locked;
      if v_id is null then
        return;
      end if;
    end if;

    -- The ephemeral worker's one claim. Two claims of one ephemeral token at
    -- once: the second to write this row raises 40001 (REPEATABLE READ), and
    -- its retry sees claimed_lease set and claims nothing.
    -- It is seen now too: the token check's `seen` leaves this row to us.
    if v_worker.ephemeral then
      update workers set claimed_lease = p_lease_id, last_seen_at = now() where id = p_worker;
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

    -- The first claim of a job in a group of its own takes the job's slot.
    -- Of two first claims of one job, the second's update meets the first's
    -- commit (40001), and its retry finds the slot held.
    update jobs set group_held = true
     where id = v_task.job_id and concurrency_key is not null and not group_held;
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
