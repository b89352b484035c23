// The project page's parts for issue #29: the Run form (a field per input
// the pipeline declared, for people allowed to run), the project's
// schedules, and the status badge with the Markdown to paste.
import type { Pool, Queryable } from '../db/index.ts';
import type { Keyring } from '../secrets.ts';
import { badgePath, badgeState, renderBadge, signBadge } from './badge.ts';
import { Html, html, timeEl } from './html.ts';

/** An input as the latest compiled job of the project declared it (lib/pipeline/inputs.ts). */
interface DeclaredInput {
  name: string;
  type: 'string' | 'number' | 'boolean' | 'choice';
  description: string | null;
  required: boolean;
  default: string | null;
  options: string[] | null;
}

/**
 * The inputs the latest compiled TRUSTED job of the ref declared: the Run
 * form's fields. Never an untrusted job's (a fork's pull request could
 * otherwise plant fields of its own on the form, such as one asking for a token).
 */
async function declaredInputs(
  db: Queryable,
  projectId: string,
  ref: string,
): Promise<DeclaredInput[]> {
  const full = ref.startsWith('refs/') ? ref : `refs/heads/${ref}`;
  const { rows } = await db.query<{ declared_inputs: DeclaredInput[] | null }>(
    `select declared_inputs from jobs
      where project_id = $1 and ref = $2 and trusted and started_at is not null
      order by number desc limit 1`,
    [projectId, full],
  );
  return rows[0]?.declared_inputs ?? [];
}

function field(input: DeclaredInput): Html {
  const id = `input-${input.name}`;
  const name = `input.${input.name}`;
  const label = html`<label for="${id}">${input.name}${input.required ? ' (required)' : ''}</label>${input.description ? html` <span class="muted">${input.description}</span>` : ''}<br>`;
  if (input.type === 'choice' || input.type === 'boolean') {
    const options = input.type === 'boolean' ? ['true', 'false'] : (input.options ?? []);
    const blank = input.default === null && !input.required;
    return html`<p>${label}<select id="${id}" name="${name}" data-input="${input.name}">${blank ? html`<option value=""></option>` : ''}${options.map((o) => html`<option value="${o}"${o === input.default ? ' selected' : ''}>${o}</option>`)}</select></p>`;
  }
  const type = input.type === 'number' ? 'number' : 'text';
  return html`<p>${label}<input id="${id}" name="${name}" type="${type}"${input.type === 'number' ? ' step="any"' : ''} value="${input.default ?? ''}" data-input="${input.name}"${input.required ? ' required' : ''}></p>`;
}

/**
 * The Run form: a ref (the project's default branch, else `main`) and a field per input the latest
 * trusted job of that ref declared,
 * posted with the CSRF token to `/projects/{id}/run`. Only for a viewer who
 * may run (the caller asks lib/app/people.ts).
 */
export async function renderRunForm(
  db: Queryable,
  projectId: string,
  csrf: string,
  ref?: string,
): Promise<Html> {
  // The repository's default branch, as its webhooks said it (else main).
  const defaultRef =
    ref ??
    (
      await db.query<{ branch: string }>(
        `select coalesce(default_branch, 'main') as branch from projects where id = $1`,
        [projectId],
      )
    ).rows[0]?.branch ??
    'main';
  const inputs = await declaredInputs(db, projectId, defaultRef);
  return html`<h2>Run</h2><form method="post" action="/projects/${encodeURIComponent(projectId)}/run" data-run-form>
<input type="hidden" name="csrf" value="${csrf}">
<p><label for="run-ref">Branch or ref</label><br><input id="run-ref" name="ref" value="${defaultRef}" required></p>
${inputs.map(field)}${inputs.length === 0 ? html`<p class="muted">The pipeline declares no inputs (as of the latest trusted job of ${defaultRef}).</p>` : ''}
<p><button type="submit">Run</button></p>
</form>`;
}

/** The project's schedules, read-only (change them with the API or ctl). */
export async function renderSchedules(
  db: Queryable,
  projectId: string,
  now = Date.now(),
): Promise<Html> {
  const { rows } = await db.query<{
    name: string;
    cron: string;
    timezone: string;
    ref: string | null;
    enabled: boolean;
    next_run_at: Date | null;
    last_run_at: Date | null;
    last_job_id: string | null;
    last_error: string | null;
  }>(
    `select name, cron, timezone, ref, enabled, next_run_at, last_run_at, last_job_id, last_error
       from schedules where project_id = $1 order by name`,
    [projectId],
  );
  if (rows.length === 0) {
    return html`<h2>Schedules</h2><p class="muted">No schedules: add one with npm run ctl -- schedule create --project ${projectId} --name nightly --cron "0 3 * * *".</p>`;
  }
  const lines = rows.map(
    (s) =>
      html`<tr data-schedule="${s.name}"><td>${s.name}</td><td><code>${s.cron}</code> ${s.timezone}</td><td>${s.ref ?? 'default branch'}</td><td>${s.enabled ? (s.next_run_at ? timeEl(s.next_run_at, now) : 'never') : 'disabled'}</td><td>${s.last_job_id ? html`<a href="/jobs/${s.last_job_id}">${s.last_run_at ? timeEl(s.last_run_at, now) : 'job'}</a>` : 'never'}</td><td data-last-error>${s.last_error ?? ''}</td></tr>`,
  );
  return html`<h2>Schedules</h2><div class="scroll"><table><thead><tr><th>schedule</th><th>when</th><th>ref</th><th>next</th><th>last</th><th>last error</th></tr></thead><tbody>${lines}</tbody></table></div>`;
}

/**
 * The badge (drawn inline, as `main`'s badge reads now) and the Markdown to
 * paste: unsigned for a public project, the signed URL for a private one
 * (shown to signed-in viewers only).
 */
export async function renderBadgeSection(
  db: Pool,
  keyring: Keyring,
  projectId: string,
  origin: string,
  isPublic: boolean,
): Promise<Html> {
  const sig = isPublic ? null : signBadge(keyring, projectId, 'main');
  const path = badgePath(projectId, 'main', sig);
  const url = `${origin.replace(/\/+$/, '')}${path}`;
  const markdown = `[![conductor](${url})](${origin.replace(/\/+$/, '')}/projects/${encodeURIComponent(projectId)})`;
  // Inline, not an <img>: the page's markup makes no image element at all.
  const svg = new Html(renderBadge(await badgeState(db, projectId, 'main')));
  return html`<h2>Badge</h2><p data-badge>${svg}</p><p>Markdown for a README${isPublic ? '' : ' (the link is signed: anyone who has it sees the status)'}:</p><pre data-badge-markdown>${markdown}</pre>`;
}
