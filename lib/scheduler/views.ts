// Jobs and tasks as the API and the pages show them (the contract's Job and
// TaskView): the scheduler's rows, read.
import type { Queryable } from '../db/index.ts';
import { NotFoundError } from '../errors.ts';
import type { CompiledBlock } from '../pipeline/index.ts';
import type { JobRow } from './types.ts';

export type JobView = Omit<
  JobRow,
  | 'delivery_id'
  | 'body_sha256'
  | 'confirm_writers'
  | 'compile_attempts'
  | 'dispatched_at'
  | 'push_before'
  | 'push_forced'
  | 'push_created'
  | 'payload_files'
  | 'declared_inputs'
>;

const JOB_VIEW = `id, project_id, number, state, trigger, ref, sha, base_ref, pull_request, trusted,
  trust_reason, approved_at, rerun_of, pipeline_name, error, errors, created_at, started_at,
  finished_at, diff_base, diff_files, diff_count, diff_note, inputs, schedule_name`;

export interface TaskView {
  id: string;
  name: string;
  base_name: string;
  matrix: Record<string, string>;
  state: string;
  needs: string[];
  labels: string[];
  image: string | null;
  attempt: number;
  max_attempts: number;
  allow_failure: boolean;
  exit_code: number | null;
  error: string | null;
  outputs: Record<string, string>;
  copied_from: string | null;
  /**
   * Why a queued task waits beyond the queue itself: no registered worker of
   * its pool (trusted or untrusted) has its labels. Null otherwise.
   */
  queue_reason: string | null;
  /** A block step's prompt and fields (migrations/013); null for a task with a script. */
  block: CompiledBlock | null;
  blocked_at: Date | null;
  block_deadline: Date | null;
  unblocked_by: string | null;
  unblocked_at: Date | null;
  started_at: Date | null;
  finished_at: Date | null;
}

// A queued task no registered worker can ever claim: none of its pool (an
// untrusted worker for an untrusted task, any other for a trusted one), none
// of its pool with all of its labels, or none of those scoped to its project
// (an ephemeral worker that has made its one claim claims no more). Workers
// are few, so reading them per queued task is cheap; other states never ask.
const POOL = 'not w.revoked and w.untrusted = not t.trusted';
const PROJECT = '(select jp.project_id from jobs jp where jp.id = t.job_id)';
// Holders of an `org:` group from other projects are counted, never named:
// job numbers are per project, and whoever reads this one's page may not
// read theirs (issue #46). `rows` selects one row per such job.
const OTHERS = (rows: string) =>
  `(select case count(*) when 0 then null when 1 then 'a job of another project'
                else count(*) || ' jobs of other projects' end
      from (${rows}) others)`;

// A task waiting for its concurrency group says which, who holds it and its
// place in the group's queue (1: next).
const GROUP_REASON = `case when t.state = 'queued' and t.concurrency_key is not null
    and ((select count(*) >= least(t.concurrency_limit, min(h.concurrency_limit)) from tasks h
           where h.concurrency_key = t.concurrency_key and h.state = 'running')
         or exists (select 1 from tasks o
                     where o.concurrency_key = t.concurrency_key and o.state = 'queued'
                       and (o.job_created_at, o.position) < (t.job_created_at, t.position)))
  then format('waiting for group %s%s, position %s', t.concurrency_group,
              coalesce(', held by ' || nullif(concat_ws(', ',
                (select string_agg('job #' || hj.number, ', ' order by hj.number)
                   from tasks h join jobs hj on hj.id = h.job_id
                  where h.concurrency_key = t.concurrency_key and h.state = 'running'
                    and hj.project_id = ${PROJECT}),
                ${OTHERS(`select distinct hj.id from tasks h join jobs hj on hj.id = h.job_id
                           where h.concurrency_key = t.concurrency_key and h.state = 'running'
                             and hj.project_id <> ${PROJECT}`)}), ''), ''),
              1 + (select count(*) from tasks o
                    where o.concurrency_key = t.concurrency_key and o.state = 'queued'
                      and (o.job_created_at, o.position) < (t.job_created_at, t.position)))
  end`;

// As the claim (migrations/functions/conductor_claim.sql) counts them: the
// limit is the smallest of the job's and its holders', and only an older job
// with a task to claim waits ahead (one waiting on a block does not).
const QUEUED_TASK = `exists (select 1 from tasks q where q.job_id = o.id and q.state = 'queued')`;

// A task of a job waiting for its pipeline's group (not holding it yet, and
// not its turn or no slot free).
const JOB_GROUP_REASON = `(select case when j.concurrency_key is not null and not j.group_held
         and t.state = 'queued'
         and ((select count(*) >= least(j.concurrency_limit, min(h.concurrency_limit))
                 from jobs h where h.concurrency_key = j.concurrency_key
                 and h.state = 'running' and h.group_held)
              or exists (select 1 from jobs o where o.concurrency_key = j.concurrency_key
                           and o.state = 'running' and not o.group_held
                           and (o.created_at, o.id) < (j.created_at, j.id)
                           and ${QUEUED_TASK}))
    then format('waiting for group %s%s, position %s', j.concurrency_group,
                coalesce(', held by ' || nullif(concat_ws(', ',
                  (select string_agg('job #' || h.number, ', ' order by h.created_at)
                     from jobs h
                    where h.concurrency_key = j.concurrency_key
                      and h.state = 'running' and h.group_held and h.project_id = j.project_id),
                  ${OTHERS(`select h.id from jobs h
                             where h.concurrency_key = j.concurrency_key and h.state = 'running'
                               and h.group_held and h.project_id <> j.project_id`)}), ''), ''),
                1 + (select count(*) from jobs o
                      where o.concurrency_key = j.concurrency_key and o.state = 'running'
                        and not o.group_held and (o.created_at, o.id) < (j.created_at, j.id)
                        and ${QUEUED_TASK}))
    end
   from jobs j where j.id = t.job_id)`;

// Runner pools (migrations/023, issue #51): a launch that failed and waits to
// be tried again, a pool's runner on its way, or no runner or pool at all.
// Null without pools (conductor_pool_reason), and the reasons below stand.
const POOL_REASON = `case when t.state = 'queued'
  then conductor_pool_reason(t.id, t.labels, t.trusted, ${PROJECT}) end`;

const QUEUE_REASON = `case when t.state = 'queued' and not exists (
    select 1 from workers w
     where ${POOL} and t.labels <@ w.labels
       and (w.projects is null or ${PROJECT} = any (w.projects))
       and not (w.ephemeral and w.claimed_lease is not null))
  then case when not exists (select 1 from workers w where ${POOL})
            then format('no %s worker is registered',
                        case when t.trusted then 'trusted' else 'untrusted' end)
            when not exists (select 1 from workers w where ${POOL} and t.labels <@ w.labels)
            then format('no %s worker has the labels %s',
                        case when t.trusted then 'trusted' else 'untrusted' end,
                        array_to_string(t.labels, ', '))
            else format('no %s worker%s may claim tasks of project %s',
                        case when t.trusted then 'trusted' else 'untrusted' end,
                        case when cardinality(t.labels) > 0
                             then ' with the labels ' || array_to_string(t.labels, ', ')
                             else '' end,
                        ${PROJECT}) end
  end`;

/** A project's jobs, newest first; `before` is a job number. */
export async function listJobs(
  db: Queryable,
  projectId: string,
  limit: number,
  before?: number,
): Promise<JobView[]> {
  const { rows } = await db.query<JobView>(
    `select ${JOB_VIEW} from jobs
      where project_id = $1 and ($2::int is null or number < $2)
      order by number desc limit $3`,
    [projectId, before ?? null, limit],
  );
  return rows;
}

/** One job with its tasks in pipeline order, or a 404. */
export async function getJobView(
  db: Queryable,
  jobId: string,
): Promise<{ job: JobView; tasks: TaskView[] }> {
  const found = await db.query<JobView>(`select ${JOB_VIEW} from jobs where id = $1`, [jobId]);
  const job = found.rows[0];
  if (!job) throw new NotFoundError(`job ${jobId} does not exist`);
  const { rows } = await db.query<TaskView>(
    `select t.id, t.name, t.base_name, t.matrix, t.state, t.needs, t.labels, t.image, t.attempt,
            t.max_attempts, t.allow_failure, t.exit_code, t.error, t.copied_from,
            t.started_at, t.finished_at, t.block, t.blocked_at, t.block_deadline,
            t.unblocked_by, t.unblocked_at,
            coalesce((select jsonb_object_agg(o.name, o.value) from task_outputs o where o.task_id = t.id),
                     '{}'::jsonb) as outputs,
            coalesce(${JOB_GROUP_REASON}, ${GROUP_REASON}, ${POOL_REASON}, ${QUEUE_REASON}) as queue_reason
       from tasks t where t.job_id = $1 order by t.position`,
    [jobId],
  );
  return { job, tasks: rows };
}

/** A job as the API shows it, or a 404. */
export async function getJobOnly(db: Queryable, jobId: string): Promise<JobView> {
  const { rows } = await db.query<JobView>(`select ${JOB_VIEW} from jobs where id = $1`, [jobId]);
  if (!rows[0]) throw new NotFoundError(`job ${jobId} does not exist`);
  return rows[0];
}
