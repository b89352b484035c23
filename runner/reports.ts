// The runner's side of test reports (docs/pipeline.md#reports-test-results):
// after the script, whatever its outcome, the files `reports: junit:` names
// are found, copied and uploaded exactly as artifacts are (runner/artifacts.ts:
// the same walk that never follows a link, the same checked reads, the same
// store URLs), one file at a time, each read by the control plane at its
// commit. Nothing here fails the task: a report that cannot be uploaded or
// read is a line in the log.
import { mkdtemp, rm } from 'node:fs/promises';
import { join } from 'node:path';
import {
  copyOut,
  digest,
  findFiles,
  putParts,
  type StorageContext,
  type Upload,
} from './artifacts.ts';
import { HttpStatusError } from './client.ts';

// The control plane's bounds (lib/reports/limits.ts), checked here too so
// that a file the control plane would refuse is never sent.
const REPORT_MAX_BYTES = 10 * 1024 * 1024;
const REPORT_MAX_FILES = 20;

interface ReportAnswer {
  id: string;
  path: string;
  state: 'pending' | 'parsed' | 'failed';
  note: string | null;
  totals?: { passed: number; failed: number; errored: number; skipped: number; time_s: number };
}

const taskPath = (ctx: StorageContext, rest: string) =>
  `/v1/runner/tasks/${encodeURIComponent(ctx.task.id)}/${rest}`;

/** Uploads the task's test reports; says in the log what each one held, or why it was left. */
export async function uploadReports(ctx: StorageContext, patterns: string[]): Promise<void> {
  const found = (await findFiles(ctx.workspace, patterns)).filter((f) => !f.link);
  if (found.length === 0) {
    ctx.note(`no file matches the test reports' paths (${patterns.join(', ')}): none read`);
    return;
  }
  if (found.length > REPORT_MAX_FILES) {
    ctx.note(
      `the test reports' paths match ${found.length} files; the first ${REPORT_MAX_FILES} are read`,
    );
  }
  const copy = await mkdtemp(join(ctx.scratch, 'reports-'));
  try {
    for (const file of found.slice(0, REPORT_MAX_FILES)) {
      if (file.size > REPORT_MAX_BYTES) {
        ctx.note(
          `test report ${file.path} is ${file.size} bytes; at most ${REPORT_MAX_BYTES} are read: not uploaded`,
        );
        continue;
      }
      try {
        await copyOut(ctx.workspace, [file], copy);
        const report = await uploadOne(ctx, file.path, join(copy, ...file.path.split('/')));
        ctx.note(describe(report));
      } catch (err) {
        if (ctx.signal.aborted) throw err;
        ctx.note(`test report ${file.path} could not be uploaded: ${(err as Error).message}`);
      }
    }
  } finally {
    await rm(copy, { recursive: true, force: true });
  }
}

async function uploadOne(ctx: StorageContext, path: string, file: string): Promise<ReportAnswer> {
  const { sha256, size } = await digest(file);
  if (size > REPORT_MAX_BYTES) {
    throw new Error(`it grew to ${size} bytes; at most ${REPORT_MAX_BYTES} are read`);
  }
  let begun: { report: ReportAnswer; upload: Upload };
  try {
    const answer = await ctx.client.post(
      taskPath(ctx, 'reports'),
      { lease_id: ctx.task.lease_id, path, size, sha256 },
      { retryForMs: ctx.retryForMs, signal: ctx.signal },
    );
    begun = answer.body as typeof begun;
  } catch (err) {
    if (err instanceof HttpStatusError && err.status === 413) {
      const message = (err.body as { error?: { message?: string } })?.error?.message;
      throw new Error(message ?? err.message);
    }
    throw err;
  }
  if (begun.report.state !== 'pending') return begun.report;
  const etags = await putParts(ctx.client.url, file, begun.upload, ctx.signal);
  const committed = await ctx.client.post(
    taskPath(ctx, `reports/${encodeURIComponent(begun.report.id)}/commit`),
    { lease_id: ctx.task.lease_id, etags },
    { retryForMs: ctx.retryForMs, signal: ctx.signal },
  );
  return (committed.body as { report: ReportAnswer }).report;
}

function describe(report: ReportAnswer): string {
  if (report.state === 'failed') return `test report ${report.note ?? `${report.path}: not read`}`;
  const t = report.totals;
  if (!t) return `test report ${report.path} read`;
  const counts = [
    `${t.passed} passed`,
    `${t.failed} failed`,
    ...(t.errored ? [`${t.errored} errored`] : []),
    ...(t.skipped ? [`${t.skipped} skipped`] : []),
  ];
  return `test report ${report.path}: ${counts.join(', ')}${report.note ? ` (${report.note})` : ''}`;
}
