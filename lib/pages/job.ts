// The job page: its header, actions, the task graph, the open task's log and
// a task list; and the JSON the page polls while the job runs.

import type { Queryable } from '../db/index.ts';
import { NotFoundError } from '../errors.ts';
import { type AuditEvent, jobAuditEvents } from '../people/audit.ts';
import { getJobView, type JobView, type TaskView } from '../scheduler/views.ts';
import { FINISHED_JOB_STATES } from '../states.ts';
import { humanBytes, jobArtifacts, jobCacheRestores } from '../storage/index.ts';
import { CLIENT_SCRIPT } from './client.ts';
import { type GraphTask, renderGraph, taskLines } from './graph.ts';
import {
  durationText,
  esc,
  Html,
  html,
  page,
  scriptJson,
  shortRef,
  stateEl,
  timeEl,
} from './html.ts';
import { emptyLogNote, type LogPiece, logTail, logWindow } from './log.ts';
import { logTools } from './log-client.ts';
import { graphBadges, jobTests, testsSection } from './tests.ts';

/** Who is looking: signed in (with the session's CSRF token), or through a signed link. */
export interface Viewer {
  signedIn: boolean;
  csrf?: string;
  /** The signed link's `sig`, carried on every link and poll of the page. */
  sig?: string;
}

interface ProjectInfo {
  id: string;
  name: string;
  repo: string;
  repo_url: string;
  forge: string;
}

interface AttemptInfo {
  attempt: number;
  outcome: string | null;
  started_at: Date;
  finished_at: Date | null;
  log_size: number;
}

const isFinal = (state: string) => (FINISHED_JOB_STATES as readonly string[]).includes(state);
const TASK_FINAL = ['success', 'failed', 'skipped', 'cancelled'];

async function projectOf(db: Queryable, id: string): Promise<ProjectInfo> {
  const { rows } = await db.query<ProjectInfo>(
    'select id, name, repo, repo_url, forge from projects where id = $1',
    [id],
  );
  if (!rows[0]) throw new NotFoundError(`project ${id} does not exist`);
  return rows[0];
}

async function attemptsOf(db: Queryable, taskId: string): Promise<AttemptInfo[]> {
  const { rows } = await db.query<AttemptInfo>(
    `select attempt, outcome, started_at, finished_at, log_size from task_attempts
      where task_id = $1 order by attempt`,
    [taskId],
  );
  return rows;
}

async function jobNumber(db: Queryable, id: string | null): Promise<number | null> {
  if (!id) return null;
  const { rows } = await db.query<{ number: number }>('select number from jobs where id = $1', [
    id,
  ]);
  return rows[0]?.number ?? null;
}

/** A link within the page's job, keeping the signed link's `sig`. */
function jobHref(jobId: string, viewer: Viewer, params: Record<string, string | number> = {}) {
  const q = new URLSearchParams();
  for (const [k, v] of Object.entries(params)) q.set(k, String(v));
  if (viewer.sig) q.set('sig', viewer.sig);
  const s = q.toString();
  return `/jobs/${jobId}${s ? `?${s}` : ''}`;
}

/** A task's link on its job's page, relative to it (a thousand of them add up). */
function taskHref(taskId: string, viewer: Viewer): string {
  return viewer.sig ? `?task=${taskId}&sig=${encodeURIComponent(viewer.sig)}` : `?task=${taskId}`;
}

/** The commit on the forge's site, when the repository is there (https). */
function commitUrl(project: ProjectInfo, sha: string): string | null {
  if (!/^https?:\/\//.test(project.repo_url)) return null;
  return `${project.repo_url.replace(/\.git$/, '').replace(/\/+$/, '')}/commit/${sha}`;
}

function triggerText(job: JobView, rerunOf: number | null): string {
  const ref = shortRef(job.ref);
  switch (job.trigger) {
    case 'push':
      return `push to ${ref}`;
    case 'tag':
      return `tag ${ref}`;
    case 'pull_request':
      return `pull request${job.pull_request ? ` #${job.pull_request}` : ''} into ${shortRef(job.base_ref ?? '') || ref}`;
    case 'manual':
      return 'started by hand (admin)';
    case 'rerun':
      return rerunOf ? `rerun of job #${rerunOf}` : 'rerun';
    case 'schedule':
      return `schedule ${job.schedule_name ?? ''} on ${ref}`;
    default:
      return job.trigger;
  }
}

/** The header: state, trigger, ref, commit, trust, times and the compile's errors. */
function header(job: JobView, project: ProjectInfo, rerunOf: number | null, now: number): Html {
  const url = commitUrl(project, job.sha);
  const sha = html`<code title="${job.sha}">${job.sha.slice(0, 12)}</code>`;
  const trust = job as JobView & { trust_reason?: string | null };
  return html`<h1>Job #${job.number} ${stateEl(job.state, 'data-job-state')}</h1>
<dl class="facts">
<dt>Trigger</dt><dd>${triggerText(job, rerunOf)}</dd>
<dt>Ref</dt><dd><code>${job.ref}</code></dd>
<dt>Commit</dt><dd>${url ? html`<a href="${url}">${sha}</a>` : sha}</dd>
<dt>Trust</dt><dd>${job.trusted ? 'trusted' : 'untrusted'}${trust.trust_reason ? `: ${trust.trust_reason}` : ''}</dd>
<dt>Created</dt><dd>${timeEl(job.created_at, now)}</dd>
<dt>Started</dt><dd>${timeEl(job.started_at, now)}</dd>
<dt>Finished</dt><dd>${timeEl(job.finished_at, now)}</dd>
<dt>Duration</dt><dd>${durationText(job.started_at, job.finished_at, now) || '–'}</dd>
</dl>
${job.state === 'blocked' ? html`<p class="card">This job comes from someone who may not write to the repository. It waits for approval; approved, it runs on untrusted runners, without secrets.</p>` : ''}
${job.error ? html`<h2>Errors</h2><pre class="errors mono">${job.error}</pre>` : ''}`;
}

function actionForm(jobId: string, csrf: string, action: string, label: string, extra = ''): Html {
  return html`<form method="post" action="/jobs/${jobId}/${action}"><input type="hidden" name="csrf" value="${csrf}">${extra ? html`<input type="hidden" name="failed_only" value="${extra}">` : ''}<button type="submit"${action === 'cancel' ? new Html(' class="danger"') : ''}>${label}</button></form>`;
}

/** Most changed files the page lists; the rest are counted. */
const SHOWN_FILES = 100;

/** What the changes: filters were decided on: the diff base and the changed files, or why it is unknown. */
function changesSection(job: JobView): Html {
  if (job.diff_base === null && job.diff_note === null) return html``;
  const files = job.diff_files ?? [];
  const count = job.diff_count ?? files.length;
  const more = count - Math.min(files.length, SHOWN_FILES);
  return html`<section id="changes" aria-label="changed files"><h2>Changed files</h2>
${job.diff_base === null ? html`<p class="card" data-diff-unknown>The diff is unknown, so every task ran: ${job.diff_note ?? ''}</p>` : html`<p>Diff <code data-diff-base>${job.diff_base}</code>: ${count} file${count === 1 ? '' : 's'} changed${job.diff_note ? ` (${job.diff_note})` : ''}.</p>`}
${files.length ? html`<ul class="mono" data-diff-files>${files.slice(0, SHOWN_FILES).map((f) => html`<li>${f}</li>`)}</ul>` : ''}
${more > 0 ? html`<p class="muted" data-diff-more>and ${more} more</p>` : ''}</section>`;
}

/** Each block step: its prompt, the form to unblock it (signed in), or who unblocked it and when. */
function blockSection(job: JobView, tasks: TaskView[], viewer: Viewer, now: number): Html {
  const blocks = tasks.filter((t) => t.block && (t.state === 'blocked' || t.unblocked_by));
  if (blocks.length === 0) return html``;
  // An untrusted job's prompt and fields are written by someone who may not
  // write to the repository (a fork's pull request): the form says so, in the
  // words of the approval card above, before anyone answers it.
  const untrusted = job.trusted
    ? ''
    : html`<p data-untrusted><strong>Untrusted job.</strong> This job comes from someone who may not write to the repository: this prompt and its fields are theirs. Enter nothing you would not give them.</p>`;
  const parts = blocks.map((t) => {
    const block = t.block!;
    if (t.state !== 'blocked') {
      return html`<p class="card" data-unblocked="${t.name}"><strong>${t.name}</strong>: ${block.prompt}: unblocked by <span data-unblocked-by>${t.unblocked_by ?? ''}</span> ${timeEl(t.unblocked_at, now)}</p>`;
    }
    const inputs = block.fields.map((f) => {
      const id = `f-${t.id}-${f.name}`;
      const control =
        f.type === 'select'
          ? html`<select id="${id}" name="field.${f.name}"${f.required ? new Html(' required') : ''}>${f.required ? '' : html`<option value=""></option>`}${(f.options ?? []).map((o) => html`<option value="${o}">${o}</option>`)}</select>`
          : html`<input id="${id}" type="text" name="field.${f.name}"${f.required ? new Html(' required') : ''}>`;
      return html`<label for="${id}">${f.name}${f.required ? ' (required)' : ''}</label> ${control}`;
    });
    const form =
      viewer.signedIn && viewer.csrf
        ? html`<form method="post" action="/jobs/${job.id}/tasks/${encodeURIComponent(t.name)}/unblock" data-unblock="${t.name}"><input type="hidden" name="csrf" value="${viewer.csrf}">${inputs}<button type="submit">Unblock</button></form>`
        : html`<p class="muted">Sign in to unblock it.</p>`;
    return html`<div class="card" data-blocked="${t.name}">${untrusted}<p><strong>${t.name}</strong> waits: <span data-prompt>${block.prompt}</span> (until ${timeEl(t.block_deadline, now)}, then ${block.onTimeout === 'skip' ? 'skipped' : 'failed'})</p>${form}</div>`;
  });
  return html`<section id="blocks" aria-label="block steps"><h2>Waiting for approval</h2>${parts}</section>`;
}

/** The forms a signed-in person may use on the job as it is now. */
function actions(job: JobView, tasks: GraphTask[], viewer: Viewer): Html {
  if (!viewer.signedIn || !viewer.csrf) return html``;
  const csrf = viewer.csrf;
  const forms: Html[] = [];
  if (job.state === 'blocked') forms.push(actionForm(job.id, csrf, 'approve', 'Approve and run'));
  if (!isFinal(job.state)) {
    forms.push(actionForm(job.id, csrf, 'cancel', job.state === 'blocked' ? 'Decline' : 'Cancel'));
  } else {
    forms.push(actionForm(job.id, csrf, 'rerun', 'Rerun'));
    if (
      tasks.some((t) => t.state === 'failed' || t.state === 'cancelled' || t.state === 'skipped')
    ) {
      forms.push(actionForm(job.id, csrf, 'rerun', 'Rerun failed', 'true'));
    }
  }
  return html`${forms}`;
}

function taskRows(tasks: GraphTask[], viewer: Viewer, now: number): Html {
  // Plain concatenation: a thousand rows through the html template cost more.
  const sig = viewer.sig ? `&amp;sig=${esc(encodeURIComponent(viewer.sig))}` : '';
  const rows = tasks.map((t) => {
    const { note } = taskLines(t, now);
    return `<tr data-row="${t.id}"><td><a href="?task=${t.id}${sig}#log">${esc(t.name)}</a></td><td><span class="state st-${t.state}">${t.state}</span></td><td class="wide">${t.attempt}/${t.max_attempts}</td><td class="dur">${durationText(t.started_at, t.finished_at, now)}</td><td class="note">${esc(note)}</td></tr>`;
  });
  return html`<div class="scroll"><table><thead><tr><th>task</th><th>state</th><th class="wide">attempt</th><th>duration</th><th>notes</th></tr></thead><tbody>${new Html(rows.join(''))}</tbody></table></div>`;
}

/** The open task's log panel: its attempts, download, "load earlier" and the lines. */
function logPanel(
  jobId: string,
  task: GraphTask,
  attempts: AttemptInfo[],
  piece: LogPiece,
  viewer: Viewer,
): Html {
  const tabs = attempts.map(
    (a) =>
      html`<a href="${jobHref(jobId, viewer, { task: task.id, attempt: a.attempt })}#log"${a.attempt === piece.attempt ? new Html(' aria-current="true"') : ''}>attempt ${a.attempt}${a.outcome ? ` (${a.outcome})` : ''}</a>`,
  );
  const raw = jobHref(jobId, viewer, { task: task.id, attempt: piece.attempt });
  return html`<section id="log" aria-label="log of ${task.name}">
<h2>Log: ${task.name}</h2>
<div class="log-head">${attempts.length > 1 ? html`<nav class="tabs" aria-label="attempts">${tabs}</nav>` : attempts.length === 1 ? html`<span class="muted">attempt 1</span>` : ''}
${piece.attempt > 0 ? html`<a class="button" data-download href="${raw.replace(`/jobs/${jobId}`, `/jobs/${jobId}/raw`)}" download="${`${task.name}-attempt-${piece.attempt}.log`}">Download raw</a>` : ''}
<span class="muted" data-log-size>${piece.size ? `${piece.size} bytes` : ''}</span>
${piece.attempt > 0 ? logTools() : ''}</div>
<button type="button" data-earlier${piece.from > 0 ? '' : new Html(' hidden')}>Load earlier lines</button>
<pre class="log" data-log tabindex="0">${new Html(piece.html)}</pre>
${piece.lines === 0 ? html`<p class="muted" data-log-empty>${new Html(emptyLogNote(task.state))}</p>` : ''}
</section>`;
}

interface Loaded {
  job: JobView;
  tasks: TaskView[];
  project: ProjectInfo;
}

async function load(db: Queryable, jobId: string): Promise<Loaded> {
  const { job, tasks } = await getJobView(db, jobId);
  return { job, tasks, project: await projectOf(db, job.project_id) };
}

function findTask(tasks: TaskView[], id: string | undefined): TaskView | undefined {
  return id ? tasks.find((t) => t.id === id) : undefined;
}

/** Which task opens when none is asked for: the first that failed, if any. */
function defaultTask(tasks: TaskView[]): TaskView | undefined {
  return (
    tasks.find((t) => t.state === 'failed' && !t.allow_failure) ??
    tasks.find((t) => t.state === 'failed')
  );
}

const DONE: Readonly<Record<string, string>> = {
  approve: 'approved',
  cancel: 'cancelled',
  rerun: 'rerun',
  unblock: 'unblocked',
  run: 'started',
};

/** Who did what to the job, newest first: "approved by @alice 2 min ago" (the audit). */
function auditLines(events: AuditEvent[], now: number): Html {
  if (events.length === 0) return html``;
  const lines = events.map(
    (e) =>
      html`<li data-audit-action="${e.action}">${DONE[e.action] ?? e.action} by <strong>${e.actor}</strong> ${timeEl(e.at, now)}${e.detail ? html` <span class="muted">(${e.detail})</span>` : ''}</li>`,
  );
  return html`<ul class="muted" data-audit>${lines}</ul>`;
}

/** The whole job page. */
export async function renderJobPage(
  db: Queryable,
  jobId: string,
  viewer: Viewer,
  query: { task?: string; attempt?: number },
  now = Date.now(),
): Promise<string> {
  const { job, tasks, project } = await load(db, jobId);
  const open = query.task ? findTask(tasks, query.task) : defaultTask(tasks);
  if (query.task && !open) throw new NotFoundError(`job ${jobId} has no task ${query.task}`);
  const rerunOf = await jobNumber(db, job.rerun_of);
  const events = await jobAuditEvents(db, job.id, 5);
  const tests = await jobTests(db, job.id);
  const badges = graphBadges(tests);
  let panel = html`<p class="muted" id="log">Select a task to see its log.</p>`;
  let piece: LogPiece | null = null;
  if (open) {
    const source = open.copied_from ?? open.id;
    piece = await logWindow(db, source, query.attempt);
    panel = logPanel(job.id, open, await attemptsOf(db, source), piece, viewer);
  }
  const data = {
    live: `/jobs/${job.id}/live`,
    log: `/jobs/${job.id}/log`,
    sig: viewer.sig ?? null,
    final: isFinal(job.state),
    task: open?.id ?? null,
    taskFinal: open ? TASK_FINAL.includes(open.state) : true,
    // A page that asked for an attempt stays on it; otherwise it follows the latest.
    follow: query.attempt === undefined,
    attempt: piece?.attempt ?? null,
    from: piece?.from ?? 0,
    end: piece?.end ?? 0,
    size: piece?.size ?? 0,
    nextLine: piece ? piece.line + piece.lines - (piece.partial ? 1 : 0) : 1,
    partial: piece?.partial ?? false,
    firstLine: piece?.line ?? 1,
  };
  const body = html`<nav class="muted"><a href="/projects/${encodeURIComponent(project.id)}">${project.name}</a> / job #${job.number} · <code>${shortRef(job.ref)}</code></nav>
<div id="job-head">${header(job, project, rerunOf, now)}</div>
${auditLines(events, now)}
<div class="actions" id="job-actions">${actions(job, tasks, viewer)}</div>
${blockSection(job, tasks, viewer, now)}
${changesSection(job)}
<h2>Tasks</h2>
${tasks.length ? html`<div class="graph">${renderGraph(tasks, { href: (t) => `${taskHref(t.id, viewer)}#log`, open: open?.id, now, badge: (t) => badges.get(t.id) })}</div>` : html`<p class="muted">${job.state === 'pending' || job.state === 'blocked' ? 'The pipeline file has not been read yet.' : 'No tasks.'}</p>`}
${testsSection(tests)}
${panel}
${tasks.length ? html`<h2>All tasks</h2>${taskRows(tasks, viewer, now)}` : ''}
${await storageSection(db, job.id, tasks, viewer)}`;
  return page({
    title: `#${job.number} ${shortRef(job.ref)} · ${project.name}`,
    body,
    signedIn: viewer.signedIn,
    csrf: viewer.csrf,
    script: html`<script type="application/json" id="page-data">${scriptJson(data)}</script><script>${new Html(CLIENT_SCRIPT)}</script>`,
  });
}

/**
 * Each task's artifacts (path, size, expiry, a download link) and what its
 * cache restores found: a hit, a restore-key hit or a miss, with bytes.
 */
async function storageSection(
  db: Queryable,
  jobId: string,
  tasks: GraphTask[],
  viewer: Viewer,
): Promise<Html | string> {
  const [artifacts, restores] = await Promise.all([
    jobArtifacts(db, jobId),
    jobCacheRestores(db, jobId),
  ]);
  if (artifacts.length === 0 && restores.length === 0) return '';
  const sig = viewer.sig ? `?sig=${encodeURIComponent(viewer.sig)}` : '';
  const nameOf = new Map(tasks.map((t) => [t.id, t.name]));
  const artifactRows = artifacts.map(
    (a) =>
      html`<tr data-artifact="${a.path}"><td>${a.task_name}</td><td><a href="/jobs/${jobId}/artifacts/${a.id}${sig}" download>${a.path}</a></td><td>${humanBytes(a.size)}</td><td>${a.expires_at.toISOString().slice(0, 10)}</td></tr>`,
  );
  const restoreRows = restores.map(
    (r) =>
      html`<tr data-cache="${r.key}" data-cache-result="${r.result}"><td>${nameOf.get(r.task_id) ?? ''}</td><td><code>${r.key}</code></td><td>${r.result === 'hit' ? 'cache hit' : r.result === 'restore-key' ? `restore-key hit: ${r.matched_key ?? ''}` : 'cache miss'}</td><td>${r.result === 'miss' ? '' : humanBytes(r.size)}</td></tr>`,
  );
  return html`${artifacts.length ? html`<h2>Artifacts</h2><table class="artifacts"><tr><th>task</th><th>path</th><th>size</th><th>expires</th></tr>${artifactRows}</table>` : ''}
${restores.length ? html`<h2>Caches</h2><table class="caches"><tr><th>task</th><th>key</th><th>restore</th><th>bytes</th></tr>${restoreRows}</table>` : ''}`;
}

/** What the page polls: the header and actions again, each task's state, and the open log's new lines. */
export async function liveJob(
  db: Queryable,
  jobId: string,
  viewer: Viewer,
  query: { task?: string; attempt?: number; from?: number; line?: number },
  now = Date.now(),
): Promise<unknown> {
  const { job, tasks, project } = await load(db, jobId);
  const rerunOf = await jobNumber(db, job.rerun_of);
  let log: (LogPiece & { task_state: string; task_final: boolean }) | null = null;
  const open = findTask(tasks, query.task);
  if (query.task && !open) throw new NotFoundError(`job ${jobId} has no task ${query.task}`);
  if (open && open.attempt > 0) {
    const piece = await logTail(
      db,
      open.copied_from ?? open.id,
      query.attempt ?? open.attempt,
      query.from ?? 0,
      query.line ?? 1,
    );
    log = { ...piece, task_state: open.state, task_final: TASK_FINAL.includes(open.state) };
  }
  return {
    state: job.state,
    final: isFinal(job.state),
    header: header(job, project, rerunOf, now).text,
    actions: actions(job, tasks, viewer).text,
    tasks: tasks.map((t) => ({
      id: t.id,
      state: t.state,
      attempt: t.attempt,
      ...taskLines(t, now),
      duration: durationText(t.started_at, t.finished_at, now),
    })),
    log,
    open: open ? { id: open.id, state: open.state, attempt: open.attempt } : null,
  };
}

/** An earlier page of the open log, ending where the one shown starts. */
export async function earlierLog(
  db: Queryable,
  jobId: string,
  taskId: string,
  attempt: number,
  before: number,
): Promise<LogPiece> {
  return logWindow(db, await logSource(db, jobId, taskId), attempt, before);
}

/**
 * The task whose log a task of the job shows: its own, or for a task a
 * failed-only rerun kept, the original's. A 404 unless the task is one of the
 * job's (a signed link opens one job only).
 */
export async function logSource(db: Queryable, jobId: string, taskId: string): Promise<string> {
  const { rows } = await db.query<{ source: string }>(
    'select coalesce(copied_from, id) as source from tasks where id = $1 and job_id = $2',
    [taskId, jobId],
  );
  if (!rows[0]) throw new NotFoundError(`job ${jobId} has no task ${taskId}`);
  return rows[0].source;
}
