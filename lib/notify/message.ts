// What a notification says: the webhook's JSON body (its fields are the
// contract's, docs/api.md "Notifications"), and the same facts as a Slack
// message and as an email.

/** Test totals of a job, as `GET /v1/jobs/{id}/tests` answers them. */
export interface TestTotals {
  passed: number;
  failed: number;
  errored: number;
  skipped: number;
  time_s: number;
}

/** What a notification is about: a finished job. */
export interface FinishedJob {
  project: string;
  id: string;
  number: number;
  ref: string;
  sha: string;
  state: string;
  /** The job's page (a signed link when the project's pages are private). */
  url: string;
  failedTasks: string[];
  tests?: TestTotals;
  /** Why the destination hears of it: `failed`, `fixed` or `always`. */
  reason: string;
}

/** Most failed tasks named in one message. */
const MAX_NAMED_TASKS = 50;

/** The webhook's body: `{"event": "job.finished", "project", "job", "failed_tasks", "tests"?}`. */
export function webhookBody(job: FinishedJob): string {
  return JSON.stringify({
    event: 'job.finished',
    project: job.project,
    job: {
      id: job.id,
      number: job.number,
      ref: job.ref,
      sha: job.sha,
      state: job.state,
      url: job.url,
    },
    failed_tasks: job.failedTasks.slice(0, MAX_NAMED_TASKS),
    ...(job.tests ? { tests: job.tests } : {}),
  });
}

function shortRef(ref: string): string {
  return ref.replace(/^refs\/(heads|tags)\//, '');
}

/** One line: `my-app #42 failed on main (abc1234)`, `fixed` for a fix. */
export function headline(job: FinishedJob): string {
  const what = job.reason === 'fixed' ? 'fixed' : job.state;
  return `${job.project} #${job.number} ${what} on ${shortRef(job.ref)} (${job.sha.slice(0, 7)})`;
}

/** The lines after the headline: the failed tasks and the tests. */
export function details(job: FinishedJob): string[] {
  const lines: string[] = [];
  if (job.failedTasks.length > 0) {
    const named = job.failedTasks.slice(0, MAX_NAMED_TASKS);
    const more = job.failedTasks.length - named.length;
    lines.push(`Failed tasks: ${named.join(', ')}${more > 0 ? ` and ${more} more` : ''}`);
  }
  if (job.tests) {
    const t = job.tests;
    const bad = t.failed + t.errored;
    const total = t.passed + bad + t.skipped;
    lines.push(bad > 0 ? `${bad} of ${total} tests failed` : `${total} tests passed`);
  }
  return lines;
}

// Slack's mrkdwn: &, < and > are escaped, so a task's name cannot make a link or a mention.
function slackEscape(text: string): string {
  return text.replace(/&/g, '&amp;').replace(/</g, '&lt;').replace(/>/g, '&gt;');
}

/** A Slack incoming webhook's body: a text fallback and section blocks with the job's link. */
export function slackBody(job: FinishedJob): string {
  const icon =
    job.state === 'success'
      ? ':white_check_mark:'
      : job.state === 'failed'
        ? ':x:'
        : ':no_entry_sign:';
  const title = `${icon} <${job.url}|${slackEscape(headline(job))}>`;
  const rest = details(job).map(slackEscape);
  return JSON.stringify({
    text: headline(job),
    blocks: [
      { type: 'section', text: { type: 'mrkdwn', text: title } },
      ...(rest.length > 0
        ? [{ type: 'section', text: { type: 'mrkdwn', text: rest.join('\n') } }]
        : []),
    ],
  });
}

/** An email's subject and plain-text body. */
export function emailMessage(job: FinishedJob): { subject: string; text: string } {
  return {
    subject: headline(job),
    text: [headline(job), '', ...details(job), '', job.url, ''].join('\n'),
  };
}
