-- Notifications (issue #54, lib/notify/, lib/app/notifications.ts): a
-- project's Slack, webhook and email destinations, and an outbox of what to
-- tell them. A row is written by a trigger in the transaction that finishes a
-- job (whichever path finishes it: the settle, a failed compile, the sweep, a
-- cancel), and sent after the commit, with retries, by the sweep.
create table notifications (
  id uuid primary key default gen_random_uuid(),
  project_id text not null references projects (id) on delete cascade,
  kind text not null constraint notifications_kind_check check (kind in ('webhook', 'slack', 'email')),
  -- The URL (webhook, slack), sealed like a project secret (lib/secrets.ts):
  -- a Slack incoming webhook's URL is its credential.
  url_enc text,
  -- Shown instead of the URL: its scheme and host.
  url_host text,
  -- The addresses an email goes to.
  email_to text[],
  -- A webhook's signing secret, sealed.
  secret_enc text,
  on_events text[] not null
    constraint notifications_on_check
    check (cardinality(on_events) > 0 and on_events <@ array['failed', 'fixed', 'always']),
  branches text[],
  created_at timestamptz not null default now(),
  check ((kind = 'email') = (email_to is not null)),
  check ((kind = 'email') = (url_enc is null))
);
create index notifications_project on notifications (project_id);

create table notification_outbox (
  id bigserial primary key,
  notification_id uuid not null references notifications (id) on delete cascade,
  job_id uuid not null references jobs (id) on delete cascade,
  -- The job's state when it finished, and why this destination hears of it.
  job_state text not null,
  reason text not null constraint notification_outbox_reason_check
    check (reason in ('failed', 'fixed', 'always')),
  -- X-Conductor-Delivery: the same on every attempt, so a receiver that saw
  -- an attempt whose answer was lost can tell the retry is the same message.
  delivery_id uuid not null default gen_random_uuid(),
  attempts integer not null default 0,
  next_attempt_at timestamptz not null default now(),
  claimed_until timestamptz,
  -- Null while due: 'delivered', 'skipped' (the branch does not match), 'gave_up'.
  result text constraint notification_outbox_result_check
    check (result in ('delivered', 'skipped', 'gave_up')),
  last_error text,
  created_at timestamptz not null default now(),
  done_at timestamptz
);
create index notification_outbox_due on notification_outbox (next_attempt_at) where result is null;
create index notification_outbox_job on notification_outbox (job_id);

-- "fixed" asks for the previous finished job of the same ref.
create index jobs_finished_ref on jobs (project_id, ref, finished_at)
  where state in ('success', 'failed');

-- The trigger's body lives in migrations/functions/conductor_job_finished_notify.sql,
-- applied after this migration; this stub lets the trigger be created first.
create or replace function conductor_job_finished_notify() returns trigger
language plpgsql as $$ begin return null; end $$;

create trigger jobs_finished_notify
  after insert or update of state on jobs
  for each row
  when (new.state in ('success', 'failed', 'cancelled'))
  execute function conductor_job_finished_notify();
