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
