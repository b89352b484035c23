// A job's test totals in a few words, for its commit status and its
// notifications: apart from lib/app/reports.ts so that what posts statuses
// (every function that moves a job) does not load report uploads and the
// artifact store with it (docs/architecture.md, "Bundles").
import type { Queryable } from '../db/index.ts';
import type { TestTotals } from '../reports/report.ts';
import { jobTestRows, sumTotals } from '../reports/rows.ts';

/**
 * The job's test totals, or null when none of its tasks reported any: for
 * a notification's body and the commit status.
 */
export async function testTotals(
  ctx: { pool: Queryable },
  jobId: string,
): Promise<TestTotals | null> {
  const tasks = await jobTestRows(ctx.pool, jobId);
  return tasks.length === 0 ? null : sumTotals(tasks);
}

/** "2 of 340 tests failed", "338 tests passed, 2 skipped": the commit status's words. */
export function describeTests(totals: TestTotals): string {
  const broken = totals.failed + totals.errored;
  const all = totals.passed + broken + totals.skipped;
  const tests = (n: number) => `${n} ${n === 1 ? 'test' : 'tests'}`;
  if (broken > 0) return `${broken} of ${tests(all)} failed`;
  return `${tests(totals.passed)} passed${totals.skipped > 0 ? `, ${totals.skipped} skipped` : ''}`;
}
