// Test reports (docs/pipeline.md#reports-test-results): the runner uploads
// each JUnit file a task's `reports: junit:` names through the store, as an
// artifact's bytes go; at its commit the control plane reads the file back
// (bounded), parses it outside any transaction, and writes the summary in
// one short transaction. A file that cannot be read fails only its own
// reading: its row says why (the task's note), and nothing else changes.
// The claim and the completion never wait on any of it.
import { randomUUID } from 'node:crypto';
import type { AppContext } from '../context.ts';
import { transaction } from '../db/index.ts';
import { NotFoundError, PayloadTooLargeError } from '../errors.ts';
import { log } from '../log.ts';
// Not lib/reports/index.ts: that carries junit.ts and its XML parser, which
// only reading a report loads (below).
import { REPORT_MAX_BYTES } from '../reports/limits.ts';
import {
  type ParsedReport,
  ReportError,
  type TestFailure,
  type TestTotals,
  testKey,
} from '../reports/report.ts';
import {
  attemptReport,
  earlierFailures,
  insertReport,
  jobExists,
  jobTestRows,
  type ReportRow,
  recordParsed,
  recordUnreadable,
  setReportUploadId,
  sumTotals,
  type TaskTests,
} from '../reports/rows.ts';
import { leasedTask, UPLOAD_URL_TTL_S } from '../storage/index.ts';
import * as z from '../zod.ts';
import { CommitSchema, finishAndCheck, storeOf } from './artifacts.ts';

export { describeTests, testTotals } from './test-totals.ts';
export { CommitSchema as ReportCommitSchema };

const ReportPath = z.string().check(
  z.minLength(1),
  z.maxLength(1024),
  z.regex(/^[^\0\n\r/][^\0\n\r]*$/, 'must be a relative path on one line'),
  z.refine((p) => !p.split('/').includes('..'), 'must not contain ".."'),
);

export const ReportBeginSchema = z.strictObject({
  lease_id: z.uuid({ message: 'must be a lease id' }),
  path: ReportPath,
  size: z.number().check(z.int(), z.gte(0), z.lte(2 ** 50)),
  sha256: z.string().check(z.regex(/^[0-9a-f]{64}$/, 'must be 64 lowercase hex digits')),
});
export type ReportBegin = z.infer<typeof ReportBeginSchema>;

/** A report as the runner is answered: what was read from it, or why it could not be. */
export interface ReportView {
  id: string;
  path: string;
  state: ReportRow['state'];
  note: string | null;
  totals?: TestTotals;
}

/**
 * Starts the upload of one test report by the attempt the worker holds:
 * a 413 for a file over REPORT_MAX_BYTES or past the attempt's file count.
 * Repeating it answers the same report and URLs.
 */
export async function beginReport(
  ctx: AppContext,
  workerId: string,
  taskId: string,
  body: ReportBegin,
): Promise<{
  report: ReportView;
  upload: { upload_id: string | null; parts: Array<{ url: string; size: number }> };
}> {
  if (body.size > REPORT_MAX_BYTES) {
    throw new PayloadTooLargeError(
      `test report "${body.path}" is ${body.size} bytes; at most ${REPORT_MAX_BYTES} bytes are read`,
    );
  }
  const store = storeOf(ctx);
  const row = await transaction(ctx.pool, async (tx) => {
    const task = await leasedTask(tx, taskId, body.lease_id, workerId);
    const key = `reports/${task.project_id}/${task.job_id}/${randomUUID()}`;
    return insertReport(tx, task, body, key);
  });
  let uploadId = row.upload_id;
  if (uploadId === null && row.state === 'pending') {
    const created = await store.createUpload(row.storage_key, row.size);
    if (created !== null) {
      uploadId = await transaction(ctx.pool, (tx) => setReportUploadId(tx, row.id, created));
    }
  }
  const plan = await store.partUrls(row.storage_key, uploadId, row.size, UPLOAD_URL_TTL_S);
  return { report: reportView(row), upload: { upload_id: plan.uploadId, parts: plan.parts } };
}

function reportView(row: ReportRow, totals?: TestTotals): ReportView {
  return {
    id: row.id,
    path: row.path,
    state: row.state,
    note: row.note,
    ...(totals ? { totals } : {}),
  };
}

/**
 * Commits an uploaded report and reads it: the stored object (at most
 * REPORT_MAX_BYTES) is parsed outside any transaction, and its totals and
 * failures written in one. A report that cannot be read is recorded with
 * the reason, and the answer says it; the object is deleted either way.
 */
export async function commitReport(
  ctx: AppContext,
  workerId: string,
  taskId: string,
  reportId: string,
  body: z.infer<typeof CommitSchema>,
): Promise<{ report: ReportView }> {
  const store = storeOf(ctx);
  const row = await transaction(ctx.pool, async (tx) => {
    const task = await leasedTask(tx, taskId, body.lease_id, workerId);
    return attemptReport(tx, task, reportId);
  });
  if (row.state !== 'pending') return { report: reportView(row) };
  await finishAndCheck(
    store,
    row.storage_key,
    row.upload_id,
    body.etags,
    row.size,
    `test report "${row.path}"`,
  );
  const bytes = await store.read(row.storage_key, REPORT_MAX_BYTES + 1);
  let parsed: ParsedReport | null = null;
  let note: string | null = null;
  try {
    if (bytes === null) throw new ReportError('the uploaded file is gone from the store');
    // The XML parser is loaded by the first report read, not at a cold start.
    const { parseJUnit } = await import('../reports/junit.ts');
    parsed = parseJUnit(bytes);
    note = parsed.note;
  } catch (err) {
    // Whatever the parser threw, only this file's reading fails.
    if (!(err instanceof ReportError)) log('warn', 'a test report could not be parsed', { err });
    note = `${row.path}: ${err instanceof ReportError ? err.message : 'the report cannot be read'}`;
  }
  const answer = await transaction(ctx.pool, async (tx) => {
    if (!parsed) {
      await recordUnreadable(tx, row.id, note!);
      return reportView({ ...row, state: 'failed', note });
    }
    const failures = withFlaky(parsed, await earlierFailures(tx, row.task_id, row.attempt));
    await recordParsed(tx, row, parsed.totals, failures, note);
    return reportView({ ...row, state: 'parsed', note }, parsed.totals);
  });
  try {
    await store.delete([row.storage_key]);
  } catch (err) {
    // The summary is kept; on S3 the bucket's lifecycle rule removes the object.
    log('warn', 'a read test report could not be deleted from the store', { err });
  }
  return { report: answer };
}

/**
 * The report's failures, plus a flaky entry for each test an earlier
 * attempt of the task saw fail and this one saw pass.
 */
function withFlaky(
  parsed: ParsedReport,
  earlier: Array<{ suite: string; classname: string | null; name: string; message: string }>,
): TestFailure[] {
  const failures = [...parsed.failures];
  const listed = new Set(failures.map(testKey));
  for (const e of earlier) {
    const key = testKey(e);
    if (!parsed.passed.has(key) || listed.has(key)) continue;
    listed.add(key);
    failures.push({
      kind: 'passed',
      flaky: true,
      suite: e.suite,
      name: e.name,
      classname: e.classname,
      file: null,
      line: null,
      message: e.message,
    });
  }
  return failures;
}

/** A job's tests as `GET /v1/jobs/{id}/tests` answers them. */
export interface JobTests {
  totals: TestTotals;
  tasks: TaskTests[];
}

/** A job's tests: totals, and per task with reports its totals and failures. A 404 for no job. */
export async function listJobTests(ctx: AppContext, jobId: string): Promise<JobTests> {
  const tasks = await jobTestRows(ctx.pool, jobId);
  if (tasks.length === 0 && !(await jobExists(ctx.pool, jobId))) {
    throw new NotFoundError(`job ${jobId} does not exist`);
  }
  return { totals: sumTotals(tasks), tasks };
}
