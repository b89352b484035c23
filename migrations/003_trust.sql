-- Trust (issue #13): untrusted jobs wait for approval, runners are split into
-- two pools by trust, Gitea pull requests from the base repository are
-- trusted only once Gitea confirms the sender may write, and a signed body
-- replayed under a new delivery id is recognised. Values of the new CHECK
-- constraints match lib/states.ts (test/db/schema.test.ts compares them).

-- A job of a project whose fork_pull_requests is 'approve' waits here, before
-- its pipeline file is read, when it is untrusted.
alter table jobs drop constraint jobs_state_check;
alter table jobs add constraint jobs_state_check
  check (state in ('pending', 'blocked', 'running', 'success', 'failed', 'cancelled'));

-- 'approve' for every project, existing ones included: an untrusted job that
-- ran at once was how a fork took over the runners.
alter table projects
  add column fork_pull_requests text not null default 'approve'
    constraint projects_fork_pull_requests_check
    check (fork_pull_requests in ('approve', 'run', 'ignore')),
  add column visibility text not null default 'private'
    constraint projects_visibility_check
    check (visibility in ('private', 'public'));

-- An untrusted worker claims only untrusted tasks; every other worker only
-- trusted ones.
alter table workers add column untrusted boolean not null default false;

alter table jobs
  -- SHA-256 of the raw webhook body that created the job. The signature does
  -- not cover the delivery id, so the same signed body under a new id is a
  -- replay: the unique index below finds it without a scan, and it goes with
  -- its job, as the delivery id does.
  add column body_sha256 bytea check (length(body_sha256) = 32),
  -- Forge logins (a Gitea pull request from the base repository) whose write
  -- access the compile confirms before the job may be trusted; null when
  -- there is nothing to confirm or once it has been settled.
  add column confirm_writers text[],
  -- Why the job is trusted or not, in words, for the job view.
  add column trust_reason text,
  add column approved_at timestamptz;
create unique index jobs_project_body on jobs (project_id, body_sha256)
  where body_sha256 is not null;

-- Cancel superseded now also reaches blocked jobs.
drop index jobs_unfinished_ref;
create index jobs_unfinished_ref on jobs (project_id, ref)
  where state in ('pending', 'blocked', 'running');

-- The job's trust, copied onto its tasks (as job_created_at is) so the claim
-- picks from its own pool in the claim index instead of walking the other
-- pool's queued tasks: an untrusted worker polling behind thousands of queued
-- trusted tasks reads one index page, not thousands of rows. A job's trust is
-- settled before its tasks exist and never changes after. The default only
-- fills the existing rows without a rewrite (metadata only); dropping it
-- afterwards makes every insert say which pool its tasks go to.
alter table tasks add column trusted boolean not null default true;
update tasks t set trusted = false from jobs j where j.id = t.job_id and not j.trusted;
alter table tasks alter column trusted drop default;
drop index tasks_claimable;
create index tasks_claimable on tasks (trusted, job_created_at, position) where state = 'queued';

-- conductor_claim as in 002, with the pool: the worker's registration decides
-- it (read here, never taken from the caller), and an id that names no worker
-- claims nothing. Still one statement, and an empty claim writes nothing.
create or replace function conductor_claim(p_worker uuid, p_labels text[], p_lease_s integer)
returns setof conductor_claimed
language plpgsql volatile
set enable_sort = off
set enable_bitmapscan = off
set lock_timeout = '5s'
as $$
declare
  v_trusted boolean;
  v_id uuid;
  v_task tasks;
  v_outputs jsonb;
begin
  select not w.untrusted into v_trusted from workers w where w.id = p_worker;
  if v_trusted is null then
    return;
  end if;

  -- trusted = v_trusted is the leading column of tasks_claimable: the scan
  -- stays inside the worker's pool, in claim order, and labels narrow it.
  select t.id into v_id
    from tasks t
   where t.state = 'queued'
     and t.trusted = v_trusted
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

  -- As in 002: the needs' outputs are final before a task is queued, and this
  -- query's snapshot is newer than the lock on the task.
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

  -- Trusted only if both the job and the task say so: the assignment hands
  -- out secrets and the repository token on this flag alone.
  return query
  select v_task, j.project_id, j.sha, j.ref, j.trusted and v_task.trusted, p.repo_url,
         p.forge_token_enc, v_outputs
    from jobs j
    join projects p on p.id = j.project_id
   where j.id = v_task.job_id;
end
$$;
