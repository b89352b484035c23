// The rows of test reports (migrations/023_test_reports.sql): one per
// uploaded file, with its totals and the failures it named. Written in
// short transactions by lib/app/reports.ts: the upload's row when it
// starts, and the summary in one transaction after the file was read.
import type { Queryable } from '../db/index.ts';
import { ConflictError, NotFoundError, PayloadTooLargeError } from '../errors.ts';
import { REPORT_MAX_FILES } from './limits.ts';
import type { TestFailure, TestTotals } from './report.ts';

/** The attempt a report belongs to. */
export interface ReportTask {
  id: string;
  job_id: string;
  project_id: string;
  attempt: number;
}

export interface ReportRow {
  id: string;
  task_id: string;
  attempt: number;
  path: string;
  storage_key: string;
  size: number;
  sha256: string;
  upload_id: string | null;
  state: 'pending' | 'parsed' | 'failed';
  note: string | null;
}

const REPORT_COLUMNS = `id, task_id, attempt, path, storage_key, size::float8 as size, sha256, upload_id,
  state, note`;

/**
 * Records the start of a report's upload by the attempt (pending), or answers
 * the row a repeated request made. A 413 past REPORT_MAX_FILES files per
 * attempt; a 409 for the same path with other contents.
 */
export async function insertReport(
  tx: Queryable,
  task: ReportTask,
  upload: { path: string; size: number; sha256: string },
  storageKey: string,
): Promise<ReportRow> {
  const { rows: count } = await tx.query<{ n: number }>(
    `select count(*)::int as n from test_reports where task_id = $1 and attempt = $2 and path <> $3`,
    [task.id, task.attempt, upload.path],
  );
  if ((count[0]?.n ?? 0) >= REPORT_MAX_FILES) {
    throw new PayloadTooLargeError(
      `the attempt already uploaded ${REPORT_MAX_FILES} test reports; at most ${REPORT_MAX_FILES} are read per attempt`,
    );
  }
  await tx.query(
    `insert into test_reports (task_id, job_id, project_id, attempt, path, storage_key, size, sha256)
     values ($1, $2, $3, $4, $5, $6, $7, $8)
     on conflict (task_id, attempt, path) do nothing`,
    [
      task.id,
      task.job_id,
      task.project_id,
      task.attempt,
      upload.path,
      storageKey,
      upload.size,
      upload.sha256,
    ],
  );
  const { rows } = await tx.query<ReportRow>(
    `select ${REPORT_COLUMNS} from test_reports where task_id = $1 and attempt = $2 and path = $3`,
    [task.id, task.attempt, upload.path],
  );
  const row = rows[0]!;
  if (row.size !== upload.size || row.sha256 !== upload.sha256) {
    throw new ConflictError(
      `test report "${upload.path}" was already uploaded by this attempt with other contents`,
    );
  }
  return row;
}

/** Keeps the multipart upload's id (S3) of a pending report. */
export async function setReportUploadId(
  tx: Queryable,
  reportId: string,
  uploadId: string,
): Promise<string> {
  const { rows } = await tx.query<{ upload_id: string }>(
    `update test_reports set upload_id = coalesce(upload_id, $2) where id = $1 returning upload_id`,
    [reportId, uploadId],
  );
  return rows[0]!.upload_id;
}

/** The attempt's report `reportId`; a 404 when the attempt has none by that id. */
export async function attemptReport(
  tx: Queryable,
  task: ReportTask,
  reportId: string,
): Promise<ReportRow> {
  const { rows } = await tx.query<ReportRow>(
    `select ${REPORT_COLUMNS} from test_reports where id = $1 and task_id = $2 and attempt = $3`,
    [reportId, task.id, task.attempt],
  );
  if (!rows[0]) throw new NotFoundError(`test report ${reportId} does not exist`);
  return rows[0];
}

/** The failures earlier attempts of the task reported (bounded), to mark the flaky ones. */
export async function earlierFailures(
  tx: Queryable,
  taskId: string,
  attempt: number,
): Promise<Array<{ suite: string; classname: string | null; name: string; message: string }>> {
  const { rows } = await tx.query<{
    suite: string;
    classname: string | null;
    name: string;
    message: string;
  }>(
    `select distinct on (suite, classname, name) suite, classname, name, message
       from test_failures
      where task_id = $1 and attempt < $2 and kind <> 'passed'
      order by suite, classname, name, attempt desc
      limit 2000`,
    [taskId, attempt],
  );
  return rows;
}

/**
 * Records what a report said: its totals and failures, in the caller's one
 * transaction. Only a pending report is recorded; answers whether it was.
 */
export async function recordParsed(
  tx: Queryable,
  report: { id: string; task_id: string; attempt: number },
  totals: TestTotals,
  failures: TestFailure[],
  note: string | null,
): Promise<boolean> {
  const { rowCount } = await tx.query(
    `update test_reports
        set state = 'parsed', note = $2, passed = $3, failed = $4, errored = $5, skipped = $6,
            time_s = $7, parsed_at = now()
      where id = $1 and state = 'pending'`,
    [report.id, note, totals.passed, totals.failed, totals.errored, totals.skipped, totals.time_s],
  );
  if (rowCount !== 1) return false;
  if (failures.length > 0) {
    await tx.query(
      `insert into test_failures (report_id, ordinal, task_id, attempt, kind, flaky, suite, name,
                                  classname, file, line, message)
       select $1, f.ordinal - 1, $2, $3, f.kind, f.flaky, f.suite, f.name, f.classname, f.file,
              f.line, f.message
         from unnest($4::text[], $5::boolean[], $6::text[], $7::text[], $8::text[], $9::text[],
                     $10::int[], $11::text[])
              with ordinality as f(kind, flaky, suite, name, classname, file, line, message, ordinal)`,
      [
        report.id,
        report.task_id,
        report.attempt,
        failures.map((f) => f.kind),
        failures.map((f) => f.flaky),
        failures.map((f) => f.suite),
        failures.map((f) => f.name),
        failures.map((f) => f.classname),
        failures.map((f) => f.file),
        failures.map((f) => f.line),
        failures.map((f) => f.message),
      ],
    );
  }
  return true;
}

/** Records that a report could not be read, and why (the task's note). */
export async function recordUnreadable(
  tx: Queryable,
  reportId: string,
  note: string,
): Promise<void> {
  await tx.query(
    `update test_reports set state = 'failed', note = $2, parsed_at = now()
      where id = $1 and state = 'pending'`,
    [reportId, note.slice(0, 2000)],
  );
}

/** A task's reports, as the job's tests show them. */
export interface TaskTests {
  task_id: string;
  task_name: string;
  attempt: number;
  totals: TestTotals;
  failures: Array<{
    suite: string;
    name: string;
    classname?: string;
    file?: string;
    line?: number;
    message: string;
    kind: 'failed' | 'errored' | 'passed';
    flaky?: true;
  }>;
  reports: Array<{ path: string; state: 'parsed' | 'failed'; note: string | null }>;
}

const zero = (): TestTotals => ({ passed: 0, failed: 0, errored: 0, skipped: 0, time_s: 0 });

/**
 * The tests of a job, per task with reports: the latest attempt that has
 * any read (or unreadable) report, its totals summed over its files, and its
 * failures (failed and errored first, then the flaky), in task order.
 */
export async function jobTestRows(pool: Queryable, jobId: string): Promise<TaskTests[]> {
  const { rows } = await pool.query<{
    id: string;
    task_id: string;
    task_name: string;
    attempt: number;
    path: string;
    state: 'parsed' | 'failed';
    note: string | null;
    passed: number;
    failed: number;
    errored: number;
    skipped: number;
    time_s: number;
  }>(
    // A task a failed-only rerun kept (copied_from) shows the reports of the task it copied.
    `select r.id, t.id as task_id, t.name as task_name, r.attempt, r.path, r.state, r.note, r.passed,
            r.failed, r.errored, r.skipped, r.time_s
       from tasks t join test_reports r on r.task_id in (t.id, t.copied_from)
      where t.job_id = $1 and r.state <> 'pending'
        and r.attempt = (select max(r2.attempt) from test_reports r2
                          where r2.task_id = r.task_id and r2.state <> 'pending')
      order by t.position, r.path`,
    [jobId],
  );
  const byTask = new Map<string, TaskTests>();
  for (const row of rows) {
    let task = byTask.get(row.task_id);
    if (!task) {
      task = {
        task_id: row.task_id,
        task_name: row.task_name,
        attempt: row.attempt,
        totals: zero(),
        failures: [],
        reports: [],
      };
      byTask.set(row.task_id, task);
    }
    task.totals.passed += row.passed;
    task.totals.failed += row.failed;
    task.totals.errored += row.errored;
    task.totals.skipped += row.skipped;
    task.totals.time_s += row.time_s;
    task.reports.push({ path: row.path, state: row.state, note: row.note });
  }
  if (byTask.size === 0) return [];
  const { rows: failures } = await pool.query<TestFailure & { task_id: string }>(
    `select t.id as task_id, f.kind, f.flaky, f.suite, f.name, f.classname, f.file, f.line,
            f.message
       from tasks t
       join test_reports r on r.task_id in (t.id, t.copied_from)
       join test_failures f on f.report_id = r.id
      where t.job_id = $1 and r.state = 'parsed'
        and f.attempt = (select max(r2.attempt) from test_reports r2
                          where r2.task_id = r.task_id and r2.state <> 'pending')
      order by (f.kind = 'passed'), r.path, f.ordinal`,
    [jobId],
  );
  for (const f of failures) {
    byTask.get(f.task_id)?.failures.push({
      suite: f.suite,
      name: f.name,
      ...(f.classname !== null ? { classname: f.classname } : {}),
      ...(f.file !== null ? { file: f.file } : {}),
      ...(f.line !== null ? { line: f.line } : {}),
      message: f.message,
      kind: f.kind,
      ...(f.flaky ? { flaky: true as const } : {}),
    });
  }
  for (const task of byTask.values()) task.totals.time_s = round(task.totals.time_s);
  return [...byTask.values()];
}

/** Seconds to the millisecond: sums of many small times carry float noise. */
export function round(seconds: number): number {
  return Math.round(seconds * 1000) / 1000;
}

/** The sum of tasks' totals. */
export function sumTotals(tasks: Array<{ totals: TestTotals }>): TestTotals {
  const total = zero();
  for (const t of tasks) {
    total.passed += t.totals.passed;
    total.failed += t.totals.failed;
    total.errored += t.totals.errored;
    total.skipped += t.totals.skipped;
    total.time_s += t.totals.time_s;
  }
  total.time_s = round(total.time_s);
  return total;
}

/** Whether the job exists. */
export async function jobExists(db: Queryable, jobId: string): Promise<boolean> {
  const { rowCount } = await db.query('select 1 from jobs where id = $1', [jobId]);
  return rowCount === 1;
}

/** Reports still pending after `olderThanS` (a runner that died mid-upload): deleted, keys answered. */
export async function deleteStaleReports(
  tx: Queryable,
  olderThanS: number,
  limit: number,
): Promise<string[]> {
  const { rows } = await tx.query<{ storage_key: string }>(
    `delete from test_reports
      where id in (select id from test_reports
                    where state = 'pending' and created_at < now() - make_interval(secs => $1)
                    limit $2)
      returning storage_key`,
    [olderThanS, limit],
  );
  return rows.map((r) => r.storage_key);
}
