// The job page's Tests section (docs/pages.md): what the tasks' test
// reports said, failures first, per task, with their messages; and the
// totals shown beside each task in the graph.
import type { Queryable } from '../db/index.ts';
import type { TestTotals } from '../reports/report.ts';
import { jobTestRows, type TaskTests } from '../reports/rows.ts';
import { formatMs, type Html, html } from './html.ts';

/** The job's tasks' test results (the latest attempt with reports of each). */
export function jobTests(db: Queryable, jobId: string): Promise<TaskTests[]> {
  return jobTestRows(db, jobId);
}

const broken = (t: TestTotals) => t.failed + t.errored;
const all = (t: TestTotals) => t.passed + t.failed + t.errored + t.skipped;

/** "2 failed · 1 errored · 338 passed · 5 skipped · 12.3s": a task's or the job's counts. */
export function totalsText(t: TestTotals): string {
  return [
    t.failed ? `${t.failed} failed` : '',
    t.errored ? `${t.errored} errored` : '',
    `${t.passed} passed`,
    t.skipped ? `${t.skipped} skipped` : '',
    formatMs(t.time_s * 1000),
  ]
    .filter(Boolean)
    .join(' · ');
}

/** What the graph shows beside a task with reports: "✗ 2/340" (failed of all), "✓ 340" (passed). */
export function graphBadges(tests: TaskTests[]): Map<string, string> {
  return new Map(
    tests.map((t) => [
      t.task_id,
      broken(t.totals) > 0 ? `✗ ${broken(t.totals)}/${all(t.totals)}` : `✓ ${t.totals.passed}`,
    ]),
  );
}

/** The Tests section: nothing when no task reported tests. */
export function testsSection(tests: TaskTests[]): Html {
  if (tests.length === 0) return html``;
  const total = tests.reduce(
    (sum, t) => ({
      passed: sum.passed + t.totals.passed,
      failed: sum.failed + t.totals.failed,
      errored: sum.errored + t.totals.errored,
      skipped: sum.skipped + t.totals.skipped,
      time_s: sum.time_s + t.totals.time_s,
    }),
    { passed: 0, failed: 0, errored: 0, skipped: 0, time_s: 0 },
  );
  const headline =
    broken(total) > 0
      ? `${broken(total)} of ${all(total)} tests failed`
      : `${total.passed} tests passed`;
  // Tasks with failures first, then the rest, each in the job's order.
  const ordered = [
    ...tests.filter((t) => broken(t.totals) > 0),
    ...tests.filter((t) => broken(t.totals) === 0),
  ];
  return html`<section id="tests" aria-label="tests"><h2>Tests</h2>
<p data-tests-total><strong>${headline}</strong> <span class="muted">${totalsText(total)}</span></p>
${ordered.map(taskPart)}</section>`;
}

function taskPart(t: TaskTests): Html {
  const attempt = t.attempt > 1 ? html` <span class="muted">(attempt ${t.attempt})</span>` : '';
  const notes = t.reports.filter((r) => r.note);
  return html`<div class="tests-task" data-tests-task="${t.task_name}"><h3>${t.task_name}${attempt} <span class="muted" data-tests-totals>${totalsText(t.totals)}</span></h3>
${t.failures.length ? html`<ul class="test-failures">${t.failures.map(failureItem)}</ul>` : ''}
${notes.map((r) => html`<p class="muted" data-report-note="${r.path}">${r.state === 'failed' ? 'not read: ' : ''}${r.note}</p>`)}</div>`;
}

function failureItem(f: TaskTests['failures'][number]): Html {
  const where = [f.classname && f.classname !== f.suite ? f.classname : '', f.file ?? '']
    .filter(Boolean)
    .join(' ');
  const line = f.line !== undefined ? `:${f.line}` : '';
  const label = f.flaky ? 'flaky' : f.kind;
  return html`<li data-test-name="${f.name}" data-test-kind="${label}"><strong>${f.suite ? `${f.suite} › ` : ''}${f.name}</strong> <span class="muted">${label}${where ? ` · ${where}${line}` : ''}</span>
<pre class="mono" data-test-message>${f.message}</pre></li>`;
}
