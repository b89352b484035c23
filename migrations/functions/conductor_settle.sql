-- The settle of a job (the follow-up, lib/scheduler/progress.ts, and the
-- sweep). Its one home: change it here (docs/database.md, "Functions").
--
-- Settles a running job with nothing left to do (failed if a task failed or
-- was cancelled without allow_failure, else success) and records the commit
-- status to post, for a project with a forge token and a forge URL, with a
-- summary such as "7 passed, 1 allowed to fail". Answers the new state, or
-- null when the job is not running or has work left (a waiting, queued,
-- running or blocked task). Of two racing settles the second waits for the
-- job row and fails with 40001 when the first commits; run again with a fresh
-- snapshot, it answers null.
--
-- History: migrations 002 (first), 013 (blocked counts as work left).

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
