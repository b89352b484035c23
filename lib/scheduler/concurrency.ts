// Concurrency groups at job start (issue #30): a job's tasks join their
// groups, and a group's mode acts on the older jobs' tasks in it. The limit
// itself is the claim statement's (migrations/functions/conductor_claim.sql): a task
// of a group is claimable when it heads the group's queue and the group has
// a free slot.
import { type Pool, type Queryable, transaction } from '../db/index.ts';
import type { CompiledConcurrency } from '../pipeline/index.ts';
import { cancelJobsTx, LOCK_WAITING } from './cancel.ts';
import { skipReachable } from './progress.ts';
import type { TaskSpec } from './types.ts';

/**
 * A group's key, in SQL, from its name, project and the job's trust: a
 * trusted job's `<project>/<group>`, or `org:<name>` as it is; an untrusted
 * job's (a fork's pull request, whose pipeline file its author wrote)
 * `untrusted:<project>/<group>`, `org:` included, so that it never waits
 * for, holds, heads or acts on a trusted group, nor reaches another project.
 */
const GROUP_KEY = (grp: string, project: string, trusted: string) =>
  `case when not ${trusted}::boolean then 'untrusted:' || ${project} || '/' || ${grp}
        when ${grp} like 'org:%' then ${grp} else ${project} || '/' || ${grp} end`;

/**
 * Whether a group's mode may act on a job of project `theirs` for a job of
 * project `mine` (SQL): always within one project; across projects only in
 * an `org:` group that both projects list in `org_groups` as it acts (the
 * compile checks the list too, but a project may leave a group while its
 * jobs wait in it). Issue #46: a writer of one project stopped another's.
 */
const MAY_ACT = (key: string, mine: string, theirs: string) =>
  `(${theirs} = ${mine}
    or (${key} like 'org:%'
        and exists (select 1 from projects pm, projects pt
                     where pm.id = ${mine} and pt.id = ${theirs}
                       and substr(${key}, 5) = any (pm.org_groups)
                       and substr(${key}, 5) = any (pt.org_groups))))`;

/**
 * Stores the groups of a job's new tasks (key: `<project>/<group>`, or the
 * `org:<name>` group as it is), then applies their modes to the tasks of
 * older jobs in the same groups: `replace_pending` cancels those still
 * queued, `cancel_running` those queued and flags those running. Answers the
 * older jobs it touched, to follow up once this commits.
 */
export async function joinGroupsTx(
  tx: Queryable,
  job: { id: string; project_id: string; created_at: Date; trusted: boolean; number?: number },
  specs: TaskSpec[],
): Promise<string[]> {
  const grouped = specs.filter((s) => s.concurrency);
  if (grouped.length === 0) return [];
  await tx.query(
    `update tasks t
        set concurrency_group = x.grp,
            concurrency_key = ${GROUP_KEY('x.grp', '$2', '$4')},
            concurrency_limit = x.lim,
            concurrency_mode = x.mode
       from jsonb_to_recordset($3::jsonb) as x (name text, grp text, lim int, mode text)
      where t.job_id = $1 and t.name = x.name`,
    [
      job.id,
      job.project_id,
      JSON.stringify(
        grouped.map((s) => ({
          name: s.name,
          grp: s.concurrency?.group,
          lim: s.concurrency?.limit,
          mode: s.concurrency?.mode,
        })),
      ),
      job.trusted,
    ],
  );
  // A job started after a newer one (created first, compiled later): its
  // tasks that a newer job's mode would have replaced or cancelled, had they
  // been there when it started, are ended now, never to run after it.
  const late = await tx.query<{ id: string; name: string }>(
    `with newer as (
       select distinct on (t.id) t.id, n.concurrency_mode as mode, nj.number
         from tasks t
         join tasks n on n.concurrency_key = t.concurrency_key
                     and n.job_created_at > t.job_created_at
                     and n.concurrency_mode in ('replace_pending', 'cancel_running')
         join jobs nj on nj.id = n.job_id
        where t.job_id = $1 and t.concurrency_key is not null
          and t.state in ('queued', 'waiting', 'blocked')
          and ${MAY_ACT('t.concurrency_key', 'nj.project_id', '$2')}
        order by t.id, n.job_created_at desc
     )
     update tasks t
        set state = 'cancelled', finished_at = now(), queued_at = null,
            error = format('%s by job #%s in group %s (%s)',
                           case when w.mode = 'replace_pending' then 'replaced' else 'cancelled' end,
                           w.number, t.concurrency_group, w.mode)
       from newer w
      where t.id = w.id
      returning t.id, t.name`,
    [job.id, job.project_id],
  );
  for (const row of late.rows) {
    await skipReachable(tx, [row.id], `skipped: ${row.name} was cancelled`);
  }
  if (!grouped.some((s) => s.concurrency?.mode !== 'queue')) return [];
  // Older jobs' tasks in the groups this job's tasks joined with a mode that
  // acts: queued ones cancelled; with cancel_running, running ones flagged
  // (their runner stops at its next heartbeat and reports cancelled).
  const { rows } = await tx.query<{ id: string; job_id: string; name: string; state: string }>(
    `with mine as (
       select distinct t.concurrency_key as key, t.concurrency_group as grp, t.concurrency_mode as mode
         from tasks t
        where t.job_id = $1 and t.concurrency_mode in ('replace_pending', 'cancel_running')
     ), me as (select number from jobs where id = $1)
     update tasks o
        set state = case when o.state = 'running' then o.state else 'cancelled' end,
            cancel_requested = o.cancel_requested or o.state = 'running',
            finished_at = case when o.state = 'running' then o.finished_at else now() end,
            queued_at = case when o.state = 'running' then o.queued_at end,
            error = case when o.state = 'running' then o.error
                         else format('%s by job #%s in group %s (%s)',
                                     case when m.mode = 'replace_pending' then 'replaced' else 'cancelled' end,
                                     (select number from me), m.grp, m.mode) end
       from mine m, jobs oj
      where o.concurrency_key = m.key and o.job_id <> $1 and o.job_created_at <= $2
        and o.trusted = $3
        and oj.id = o.job_id and ${MAY_ACT('m.key', '$4', 'oj.project_id')}
        and (o.state in ('queued', 'waiting', 'blocked')
             or (m.mode = 'cancel_running' and o.state = 'running' and not o.cancel_requested))
      returning o.id, o.job_id, o.name, o.state`,
    [job.id, job.created_at, job.trusted, job.project_id],
  );
  for (const row of rows) {
    if (row.state === 'cancelled') {
      await skipReachable(tx, [row.id], `skipped: ${row.name} was cancelled`);
    }
  }
  return [...new Set(rows.map((row) => row.job_id))];
}

/**
 * Puts a job in the group of its pipeline's top-level `concurrency:`, in the
 * caller's transaction (the job start). The job takes its slot with its first
 * claim (conductor_claim sets group_held) and keeps it until it finishes.
 */
export async function joinJobGroupTx(
  tx: Queryable,
  job: { id: string; project_id: string; trusted: boolean },
  concurrency: CompiledConcurrency,
): Promise<void> {
  await tx.query(
    `update jobs
        set concurrency_group = $3,
            concurrency_key = ${GROUP_KEY('$3', '$2', '$6')},
            concurrency_limit = $4, concurrency_mode = $5
      where id = $1`,
    [job.id, job.project_id, concurrency.group, concurrency.limit, concurrency.mode, job.trusted],
  );
}

/**
 * A started job's group mode, on older running jobs of its group, in a
 * transaction of its own after the start committed (as cancelling superseded
 * jobs is, at READ COMMITTED): `replace_pending` cancels those not holding
 * the group yet, `cancel_running` every one. Answers the jobs cancelled.
 * The older jobs are locked as they are read, and READ COMMITTED re-reads a
 * row it waited for: a job whose first claim committed meanwhile holds the
 * group and is left running by `replace_pending`.
 */
export async function applyJobGroupMode(pool: Pool, jobId: string): Promise<string[]> {
  return transaction(
    pool,
    async (tx) => {
      const { rows } = await tx.query<{ id: string; number: number; grp: string; mode: string }>(
        `select o.id, j.number, j.concurrency_group as grp, j.concurrency_mode as mode
           from jobs j
           join jobs o on o.concurrency_key = j.concurrency_key and o.state = 'running'
                      and o.trusted = j.trusted
                      and (o.created_at, o.id) < (j.created_at, j.id)
                      and ${MAY_ACT('j.concurrency_key', 'j.project_id', 'o.project_id')}
          where j.id = $1 and j.concurrency_mode in ('replace_pending', 'cancel_running')
            and (j.concurrency_mode = 'cancel_running' or not o.group_held)
          order by o.created_at
          for update of o`,
        [jobId],
      );
      const first = rows[0];
      if (!first) return [];
      const verb = first.mode === 'replace_pending' ? 'replaced' : 'cancelled';
      return cancelJobsTx(
        tx,
        rows.map((r) => r.id),
        `${verb} by job #${first.number} in group ${first.grp} (${first.mode})`,
      );
    },
    LOCK_WAITING,
  );
}
