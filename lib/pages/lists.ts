// The front page (projects with their latest jobs), a project's jobs page by
// page, and the sign-in page.

import type { Queryable } from '../db/index.ts';
import { NotFoundError } from '../errors.ts';
import { forgeName } from '../people/index.ts';
import { listJobs } from '../scheduler/views.ts';
import type { Forge as ForgeKind } from '../states.ts';
import { durationText, type Html, html, page, shortRef, timeEl } from './html.ts';
import { poolsFor } from './pools.ts';

export const JOBS_PER_PAGE = 25;
const LATEST = 5;

interface JobLine {
  id: string;
  number: number;
  state: string;
  trigger: string;
  ref: string;
  sha: string;
  created_at: Date;
  started_at: Date | null;
  finished_at: Date | null;
}

interface ProjectLine {
  id: string;
  name: string;
  repo: string;
  visibility: string;
  jobs: JobLine[];
}

/** A project's visibility, read so that a database without the column reads `private`. */
export const VISIBILITY_SQL = `coalesce(to_jsonb(p) ->> 'visibility', 'private')`;

function jobTable(jobs: JobLine[], now: number): Html {
  if (jobs.length === 0) return html`<p class="muted">No jobs yet.</p>`;
  const rows = jobs.map(
    (j) =>
      html`<tr><td><a href="/jobs/${j.id}">#${j.number}</a></td><td><span class="state st-${j.state}">${j.state}</span></td><td class="wide">${j.trigger}</td><td><code>${shortRef(j.ref)}</code></td><td class="wide"><code title="${j.sha}">${j.sha.slice(0, 8)}</code></td><td>${timeEl(j.started_at ?? j.created_at, now)}</td><td>${durationText(j.started_at, j.finished_at, now)}</td></tr>`,
  );
  return html`<div class="scroll"><table><thead><tr><th>job</th><th>state</th><th class="wide">trigger</th><th>ref</th><th class="wide">commit</th><th>started</th><th>duration</th></tr></thead><tbody>${rows}</tbody></table></div>`;
}

/**
 * `/`: every project a viewer may read (the public ones, or all when signed
 * in; with `only`, a person signed in with a forge: the public ones and those),
 * with its latest jobs.
 */
export async function renderHome(
  db: Queryable,
  viewer: { signedIn: boolean; csrf?: string; only?: string[] | undefined },
  now = Date.now(),
): Promise<string> {
  const { rows } = await db.query<ProjectLine>(
    `select p.id, p.name, p.repo, ${VISIBILITY_SQL} as visibility,
            coalesce((select jsonb_agg(j order by j.number desc)
                        from (select id, number, state, trigger, ref, sha, created_at, started_at,
                                     finished_at
                                from jobs where project_id = p.id
                               order by number desc limit $2) j), '[]'::jsonb) as jobs
       from projects p
      where ($1 and $3::text[] is null) or ${VISIBILITY_SQL} = 'public' or p.id = any ($3::text[])
      order by p.name, p.id`,
    [viewer.signedIn, LATEST, viewer.only ?? null],
  );
  const cards = rows.map(
    (p) =>
      html`<section class="card"><h2><a href="/projects/${encodeURIComponent(p.id)}">${p.name}</a> <span class="muted">${p.repo}${p.visibility === 'public' ? ' · public' : ''}</span></h2>${jobTable(p.jobs, now)}</section>`,
  );
  const body = html`<h1>Projects</h1>${
    cards.length
      ? cards
      : html`<p class="muted">${viewer.signedIn ? 'No projects yet: create one with npm run ctl -- project create.' : 'No public projects. Sign in to see the others.'}</p>`
  }`;
  return page({ title: 'Projects', body, signedIn: viewer.signedIn, csrf: viewer.csrf });
}

/** A project's visibility, or null when there is no such project. */
export async function projectVisibility(db: Queryable, id: string): Promise<string | null> {
  const { rows } = await db.query<{ visibility: string }>(
    `select ${VISIBILITY_SQL} as visibility from projects p where p.id = $1`,
    [id],
  );
  return rows[0]?.visibility ?? null;
}

/** `/projects/{id}`: its jobs, newest first, a page at a time (`before` is a job number). */
export async function renderProject(
  db: Queryable,
  id: string,
  /** `workers`: the viewer may see the workers (the admin, or write permission). */
  viewer: { signedIn: boolean; csrf?: string; workers?: boolean },
  before: number | undefined,
  now = Date.now(),
  /** The Run form, schedules and badge (lib/pages/run.ts), below the jobs. */
  extras: Html | string = '',
): Promise<string> {
  const { rows } = await db.query<{ id: string; name: string; repo: string }>(
    'select id, name, repo from projects where id = $1',
    [id],
  );
  const project = rows[0];
  if (!project) throw new NotFoundError(`project ${id} does not exist`);
  const jobs = await listJobs(db, id, JOBS_PER_PAGE + 1, before);
  const more = jobs.length > JOBS_PER_PAGE;
  const shown = jobs.slice(0, JOBS_PER_PAGE);
  const last = shown[shown.length - 1];
  const pager = html`<nav class="pager" aria-label="pages">${before ? html`<a href="/projects/${encodeURIComponent(id)}">Newest</a>` : ''}${more && last ? html`<a href="/projects/${encodeURIComponent(id)}?before=${last.number}">Older jobs</a>` : ''}</nav>`;
  const hosts = viewer.signedIn && viewer.workers;
  const workers = hosts ? await workersFor(db, id, now) : html``;
  const pools = hosts ? await poolsFor(db, id) : html``;
  const body = html`<nav class="muted"><a href="/">Projects</a></nav><h1>${project.name} <span class="muted">${project.repo}</span></h1>${jobTable(shown, now)}${pager}${extras}${workers}${pools}`;
  return page({ title: project.name, body, signedIn: viewer.signedIn, csrf: viewer.csrf });
}

interface WorkerLine {
  name: string;
  labels: string[];
  untrusted: boolean;
  projects: string[] | null;
  ephemeral: boolean;
  last_seen_at: Date | null;
}

/**
 * The workers that may claim this project's tasks, and each one's scope: a
 * worker registered for every project claims other projects' tasks too, and
 * a script that steals its token could (docs/security.md). Signed-in viewers
 * only: names and labels describe the build hosts.
 */
async function workersFor(db: Queryable, projectId: string, now: number): Promise<Html> {
  const { rows } = await db.query<WorkerLine>(
    `select name, labels, untrusted, projects, ephemeral, last_seen_at
       from workers
      where not revoked and (projects is null or $1 = any (projects))
        and not (ephemeral and claimed_lease is not null)
      order by untrusted, name`,
    [projectId],
  );
  if (rows.length === 0) {
    return html`<h2>Workers</h2><p class="muted">No worker may claim this project's tasks: register one with npm run ctl -- worker create --projects ${projectId}.</p>`;
  }
  const lines = rows.map(
    (w) =>
      html`<tr data-worker="${w.name}"><td>${w.name}</td><td>${w.untrusted ? 'untrusted' : 'trusted'}</td><td>${w.labels.join(', ')}</td><td data-scope>${w.projects === null ? 'every project' : w.projects.length === 1 ? 'this project only' : `${w.projects.length} projects`}${w.ephemeral ? ', one task' : ''}</td><td>${w.last_seen_at ? timeEl(w.last_seen_at, now) : 'never'}</td></tr>`,
  );
  return html`<h2>Workers</h2><div class="scroll"><table><thead><tr><th>worker</th><th>pool</th><th>labels</th><th>claims tasks of</th><th>last seen</th></tr></thead><tbody>${lines}</tbody></table></div>`;
}

/** `/login`: each configured forge's sign-in, and the admin token form; `next` is where to go once signed in. */
export function renderLogin(opts: {
  next: string;
  error?: string;
  signedIn: boolean;
  forges?: readonly ForgeKind[];
}): string {
  const forges = (opts.forges ?? []).map(
    (f) =>
      html`<p><a class="button" data-sign-in="${f}" href="/login/${f}?next=${encodeURIComponent(opts.next)}">Sign in with ${forgeName(f)}</a></p>`,
  );
  const body = html`<h1>Sign in</h1>
${forges.length ? html`${forges}<p class="muted">You may do on a project what the forge lets you do on its repository: read to see it, write to rerun, cancel or approve.</p><h2>Admin token</h2>` : ''}
<p>Sign in with the admin token (<code>npm start</code> prints it; deployed, it is in the app secret).</p>
${opts.error ? html`<p class="errors" role="alert">${opts.error}</p>` : ''}
<form method="post" action="/login">
<input type="hidden" name="next" value="${opts.next}">
<p><label for="token">Admin token</label><br><input id="token" name="token" type="password" autocomplete="current-password" required autofocus></p>
<p><button type="submit">Sign in</button></p>
</form>`;
  return page({ title: 'Sign in', body, signedIn: false });
}

/** A page that says what went wrong, for a person. */
export function renderError(
  status: number,
  message: string,
  viewer: { signedIn: boolean; csrf?: string },
): string {
  return page({
    title: `${status}`,
    body: html`<h1>${status === 404 ? 'Not found' : status === 403 ? 'Forbidden' : 'Something went wrong'}</h1><p>${message}</p><p><a href="/">Back to the projects</a></p>`,
    signedIn: viewer.signedIn,
    csrf: viewer.csrf,
  });
}
