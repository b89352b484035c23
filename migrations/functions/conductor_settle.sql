-- The settle of a job (the follow-up, lib/scheduler/progress.ts, and the
-- sweep). Its one home: change it here (docs/database.md, "Functions").
--
-- Settles a running job with nothing left to do (failed if a task failed or
-- was cancelled without allow_failure, else success) and records the commit
-- status to post, for a project with a forge token and a forge URL, with a
-- summary such as "7 passed, 1 allowed to fail". Answers the new state, or
-- null when the job is not running or has work left (a waiting, queued,
-- running or blocked task), or when another settle of the job holds it.
--
-- Two follow-ups that both see a job's last tasks finished both call this.
-- Before issue #36 both updated the job row: the second waited for the first
-- and failed with 40001 when it committed, to answer null on its retry. Now:
-- 1. "running with nothing left" is read first, with no lock: false answers
--    null, writing nothing (most follow-ups: siblings still running).
-- 2. True: a transaction-level advisory lock keyed on the job id is tried,
--    without waiting. Not obtained answers null at once: its holder is a
--    settle of this job whose own check passed in its snapshot. It updates
--    the job, or, if that raises 40001 (the job row changed after its
--    snapshot), the library runs it again with a fresh snapshot and it
--    settles then (or finds the job settled). Any other end of the holder
--    leaves the settle to the sweep (delayed, never lost): its connection
--    dying, its retries running out, or its update waiting out lock_timeout
--    (55P03, not retried) on a job row that a silent promotion, cancel or
--    fail_fast stop holds (before #36 both settles waited there and both
--    gave up). A settle whose snapshot still sees a sibling running stops at 1
--    and takes no lock, so it never makes a settle that can succeed give up.
-- 3. Obtained: the update and the outbox row as before. A settle that
--    committed between our snapshot and our lock still makes the update
--    raise 40001 (the lock was free again); the retry answers null.
-- The lock's key is the pair of int4s of the job id's last 64 bits (its
-- random part): the two-key space of advisory locks, which nothing else in
-- Conductor uses (the migrator's and the tests' locks use one bigint, a
-- different lock tag). Two jobs sharing a key (1 in 2^62 per pair) would at
-- worst leave one settle to the sweep.
--
-- History: migrations 002 (first), 013 (blocked counts as work left); issue
-- #36 (the check before the lock, the advisory lock; the failed check keyed
-- on the parameter).

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
  if not exists (
       select 1 from jobs j
        where j.id = p_job
          and j.state = 'running'
          and not exists (
                select 1 from tasks t
                 where t.job_id = j.id and t.state in ('waiting', 'queued', 'running', 'blocked'))) then
    return null;
  end if;
  if not pg_try_advisory_xact_lock(
           ('x' || substr(replace(p_job::text, '-', ''), 17, 8))::bit(32)::integer,
           ('x' || substr(replace(p_job::text, '-', ''), 25, 8))::bit(32)::integer) then
    return null;
  end if;

  -- The failed check names the job by the parameter, not by j.id: correlated,
  -- the planner may run it as a hashed subplan over every failed task of the
  -- table, and PostgreSQL 18 chose that on a new database's statistics (tasks
  -- analysed empty) even with sequential scans off (issue #36,
  -- test/scheduler/keyed-plans.test.ts).
  update jobs j
     set state = case when exists (
                   select 1 from tasks t
                    where t.job_id = p_job and t.state in ('failed', 'cancelled') and not t.allow_failure)
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
   where p.id = v_project and (p.forge_token_enc is not null or p.github_app) and p.repo_url ~ '^https?://';
  return v_state;
end
$$;
