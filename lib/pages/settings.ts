// A project's settings in the browser (issue #53): policies, visibility and `org:` groups,
// secrets (names only), notifications (issue #54; where they go as the API shows it), schedules, and the workers that serve it; and deleting it. For people
// the forge says administer the repository (writers see the page without its forms; readers
// get a 403). Every form carries the session's CSRF token; every change goes through the
// admin API's own use cases (handed in as a ProjectAdmin by the api function), which validate,
// audit and say what a field got wrong.
import type { AppContext } from '../context.ts';
import { AppError, ValidationError } from '../errors.ts';
import { type HttpEvent, pathParam, type Reply } from '../http/index.ts';
import type { Action, PeopleGate, Person } from '../people/index.ts';
import type { Forge as ForgeKind } from '../states.ts';
import { csrfToken, type Session, verifyCsrf } from './access.ts';
import { type Html, html, page, timeEl } from './html.ts';
import {
  form,
  htmlReply,
  redirect,
  refused,
  signedInAs,
  staleForm,
  toLogin,
  viewerOf,
} from './index.ts';
import { renderError } from './lists.ts';

/** A project's settings as the page shows them (never its webhook secret or token). */
export interface SettingsProject {
  id: string;
  name: string;
  forge: ForgeKind;
  repo: string;
  enabled: boolean;
  cancel_superseded: boolean;
  fork_pull_requests: string;
  bot_pull_requests: string;
  visibility: string;
  org_groups: string[];
  has_forge_token: boolean;
  /** Whether Conductor made the forge's webhook (and deletes it with the project). */
  hook_made: boolean;
}

/** A notification as the API shows it: the URL's origin only, never the URL or its secret. */
export interface SettingsNotification {
  id: string;
  kind: string;
  url_host?: string;
  to?: string[];
  on: string[];
  branches: string[] | null;
}

export interface SettingsSchedule {
  name: string;
  cron: string;
  timezone: string;
  ref: string | null;
  enabled: boolean;
  next_run_at: Date | null;
  last_run_at: Date | null;
  last_error: string | null;
}

export interface SettingsWorker {
  id: string;
  name: string;
  labels: string[];
  untrusted: boolean;
  projects: string[] | '*';
  ephemeral: boolean;
  last_seen_at: Date | null;
}

/** A repository offered on the Add page (lib/app/onboarding.ts). */
export interface RepoOffer {
  forge: ForgeKind;
  title: string;
  repos: {
    repo: string;
    /** Null when the forge did not say (the GitHub App's installations do not). */
    private: boolean | null;
    project: string | null;
    suggestedId: string;
  }[];
  notice: string | null;
  /** The repositories the GitHub App is installed on: the app delivers their events, no webhook is made. */
  app: boolean;
}

/**
 * What the settings and Add pages ask of the use cases (lib/app/settings.ts), handed in by the
 * api function. Form fields arrive as plain objects; the use cases' schemas read them and
 * throw a ValidationError naming the field.
 */
export interface ProjectAdmin {
  project(ctx: AppContext, id: string): Promise<SettingsProject>;
  update(ctx: AppContext, id: string, fields: Record<string, unknown>, by: Person): Promise<void>;
  secrets(ctx: AppContext, id: string): Promise<{ name: string; updated_at: Date }[]>;
  putSecret(
    ctx: AppContext,
    id: string,
    name: string,
    value: string,
    by: Person,
  ): Promise<{ warning: string | null }>;
  deleteSecret(ctx: AppContext, id: string, name: string, by: Person): Promise<void>;
  notifications(ctx: AppContext, id: string): Promise<SettingsNotification[]>;
  /** Adds one (lib/app/notifications.ts); a webhook's signing secret comes back this once. */
  createNotification(
    ctx: AppContext,
    id: string,
    fields: Record<string, unknown>,
    by: Person,
  ): Promise<{ kind: string; secret: string | null }>;
  deleteNotification(ctx: AppContext, id: string, nid: string, by: Person): Promise<void>;
  schedules(ctx: AppContext, id: string): Promise<SettingsSchedule[]>;
  createSchedule(
    ctx: AppContext,
    id: string,
    fields: Record<string, unknown>,
    by: Person,
  ): Promise<void>;
  changeSchedule(
    ctx: AppContext,
    id: string,
    name: string,
    fields: Record<string, unknown>,
    by: Person,
  ): Promise<void>;
  removeSchedule(ctx: AppContext, id: string, name: string, by: Person): Promise<void>;
  /** The workers that may claim the project's tasks (its own and those for every project), not revoked. */
  workers(ctx: AppContext, id: string): Promise<SettingsWorker[]>;
  /** Revokes one of them; a worker that serves other projects too only for the admin token. */
  revokeWorker(ctx: AppContext, id: string, workerId: string, by: Person): Promise<void>;
  /** Deletes the project, and the webhook Conductor made; `left` says a hook the forge kept. */
  removeProject(ctx: AppContext, id: string, by: Person): Promise<{ left: string | null }>;
  repositories(ctx: AppContext, person: Person): Promise<RepoOffer[]>;
  addProject(
    ctx: AppContext,
    person: Person,
    fields: Record<string, unknown>,
    origin: string,
  ): Promise<{ projectId: string; githubApp: boolean; private: boolean }>;
}

/** A route of these pages. */
export type AdminPageRoute = (
  event: HttpEvent,
  ctx: AppContext,
  admin: ProjectAdmin,
  people: PeopleGate,
) => Promise<Reply>;

/** Errors of these pages as a page: the status and the message (a field's name with it). */
export function asAdminPage(route: AdminPageRoute): AdminPageRoute {
  return async (event, ctx, admin, people) => {
    try {
      return await route(event, ctx, admin, people);
    } catch (err) {
      if (!(err instanceof AppError) || !err.expose) throw err;
      const who = await signedInAs(event, ctx).catch(() => null);
      const viewer = viewerOf(ctx, who?.session ?? null);
      return htmlReply(err.status, renderError(err.status, err.message, viewer), {
        ...(err.status === 503 ? { headers: { 'retry-after': '5' } } : {}),
      });
    }
  };
}

/** A signed-in person's form: the session, then its CSRF token; the reply to give instead, if any. */
export async function formOf(
  event: HttpEvent,
  ctx: AppContext,
): Promise<
  { session: Session; person: Person; fields: URLSearchParams; csrf: string } | { reply: Reply }
> {
  const who = await signedInAs(event, ctx);
  if (!who) return { reply: toLogin(event) };
  const fields = form(event);
  if (!verifyCsrf(ctx.keyring, who.session, fields.get('csrf') ?? undefined)) {
    return { reply: staleForm(viewerOf(ctx, who.session)) };
  }
  return { ...who, fields, csrf: csrfToken(ctx.keyring, who.session) };
}

const enc = encodeURIComponent;
const settingsPath = (id: string) => `/projects/${enc(id)}/settings`;

const FORK_CHOICES: [string, string][] = [
  ['approve', 'wait for a writer to approve (blocked)'],
  ['run', 'run at once, untrusted'],
  ['ignore', 'do not run'],
];
const BOT_CHOICES: [string, string][] = [
  ['untrusted', 'untrusted, as forks'],
  ['trusted', 'trusted, as other branches'],
];
const VISIBILITY_CHOICES: [string, string][] = [
  ['private', 'private: people the forge lets read the repository'],
  ['public', 'public: anyone, logs included'],
];

function select(name: string, id: string, choices: [string, string][], current: string): Html {
  return html`<select id="${id}" name="${name}">${choices.map(([value, label]) => html`<option value="${value}"${value === current ? ' selected' : ''}>${label}</option>`)}</select>`;
}

function checkbox(name: string, id: string, on: boolean, label: string): Html {
  return html`<p><input type="checkbox" style="width:auto" id="${id}" name="${name}" value="on"${on ? ' checked' : ''}> <label for="${id}">${label}</label></p>`;
}

const NOTIFICATION_KIND_CHOICES: [string, string][] = [
  ['webhook', 'webhook (a signed JSON POST)'],
  ['slack', 'Slack incoming webhook'],
  ['email', 'email'],
];
const NOTIFICATION_EVENT_CHOICES: [string, string][] = [
  ['failed', 'failed'],
  ['fixed', 'is fixed (passed after a failure)'],
  ['always', 'finished (always)'],
];

const SAVED: Record<string, string> = {
  added:
    'The project is added, and its webhook is set up at the forge: push to the repository to start a job.',
  'added-app':
    'The project is added, and the GitHub App delivers its pushes and pull requests and shows its jobs as check runs: push to the repository to start a job.',
  // The app's installation tokens are never handed to a runner (docs/security.md).
  'added-app-private':
    "The project is added, and the GitHub App delivers its pushes and pull requests and shows its jobs as check runs. Its repository is private: runners clone with the project's forge token, which it does not have yet; the admin token sets one (conductor project update --forge-token-file).",
  general: 'The settings are saved.',
  secret: 'The secret is saved. Its value is never shown again.',
  'secret-deleted': 'The secret is deleted.',
  notification: 'The notification is added.',
  'notification-deleted': 'The notification is deleted.',
  schedule: 'The schedule is saved.',
  'schedule-deleted': 'The schedule is deleted.',
  worker: 'The worker is revoked: its token stopped working.',
};

/** The settings page; forms only when `canChange`. */
async function renderSettings(
  ctx: AppContext,
  admin: ProjectAdmin,
  id: string,
  viewer: { signedIn: true; csrf: string },
  canChange: boolean,
  isAdminToken: boolean,
  notice: string | Html | null,
  canChangeSecrets = canChange,
): Promise<string> {
  const [project, secrets, notifications, schedules, workers] = await Promise.all([
    admin.project(ctx, id),
    admin.secrets(ctx, id),
    admin.notifications(ctx, id),
    admin.schedules(ctx, id),
    admin.workers(ctx, id),
  ]);
  const now = Date.now();
  const csrf = html`<input type="hidden" name="csrf" value="${viewer.csrf}">`;
  const base = settingsPath(id);
  const general = canChange
    ? html`<form method="post" action="${base}" data-form="general">${csrf}
<p><label for="s-fork">Pull requests from forks (and other untrusted jobs)</label><br>${select('fork_pull_requests', 's-fork', FORK_CHOICES, project.fork_pull_requests)}</p>
<p><label for="s-bot">Pull requests from bots (Dependabot, Renovate)</label><br>${select('bot_pull_requests', 's-bot', BOT_CHOICES, project.bot_pull_requests)}</p>
<p><label for="s-visibility">Who may see its pages</label><br>${select('visibility', 's-visibility', VISIBILITY_CHOICES, project.visibility)}</p>
${checkbox('cancel_superseded', 's-cancel', project.cancel_superseded, 'A new push cancels the unfinished jobs of the same branch or pull request')}
${checkbox('enabled', 's-enabled', project.enabled, 'Enabled: webhooks and schedules start jobs')}
<p><label for="s-org">org: concurrency groups its pipelines may use (names, separated by spaces or commas)</label><br><input id="s-org" name="org_groups" value="${project.org_groups.join(', ')}" maxlength="10000" size="60"></p>
<p><button type="submit">Save</button></p></form>`
    : html`<dl class="facts"><dt>pull requests from forks</dt><dd data-fact="fork_pull_requests">${project.fork_pull_requests}</dd><dt>bots' pull requests</dt><dd>${project.bot_pull_requests}</dd><dt>visibility</dt><dd>${project.visibility}</dd><dt>cancel superseded</dt><dd>${project.cancel_superseded ? 'yes' : 'no'}</dd><dt>enabled</dt><dd>${project.enabled ? 'yes' : 'no'}</dd><dt>org: groups</dt><dd>${project.org_groups.join(', ') || 'none'}</dd></dl>`;

  const secretRows = secrets.map(
    (s) =>
      html`<tr data-secret="${s.name}"><td><code>${s.name}</code></td><td>${timeEl(s.updated_at, now)}</td><td>${canChange ? html`<form method="post" action="${base}/secrets/${enc(s.name)}/delete" class="inline">${csrf}<button type="submit" data-delete-secret="${s.name}">Delete</button></form>` : ''}</td></tr>`,
  );
  const secretsPart = html`<h2 id="secrets">Secrets</h2>
${secrets.length ? html`<div class="scroll"><table><thead><tr><th>name</th><th>changed</th><th></th></tr></thead><tbody>${secretRows}</tbody></table></div>` : html`<p class="muted">No secrets.</p>`}
${
  canChange
    ? html`<form method="post" action="${base}/secrets" data-form="secret">${csrf}
<p><label for="secret-name">Name</label><br><input id="secret-name" name="name" required maxlength="200" pattern="[A-Za-z_][A-Za-z0-9_]*" autocomplete="off"></p>
<p><label for="secret-value">Value</label> <span class="muted">(set again to change it; never shown again)</span><br><textarea id="secret-value" name="value" rows="3" cols="60" maxlength="65536" autocomplete="off"></textarea></p>
<p><button type="submit">Set secret</button></p></form>`
    : ''
}`;

  const notificationRows = notifications.map(
    (n) =>
      html`<tr data-notification="${n.id}"><td data-notification-kind>${n.kind}</td><td data-notification-to>${n.kind === 'email' ? (n.to ?? []).join(', ') : html`<code>${n.url_host ?? ''}</code>`}</td><td data-notification-on>${n.on.join(', ')}</td><td data-notification-branches>${n.branches?.length ? n.branches.join(', ') : 'every branch'}</td><td>${canChangeSecrets ? html`<form method="post" action="${base}/notifications/${enc(n.id)}/delete" class="inline">${csrf}<button type="submit" data-delete-notification="${n.id}">Delete</button></form>` : ''}</td></tr>`,
  );
  const notificationsPart = html`<h2 id="notifications">Notifications</h2>
${notifications.length ? html`<div class="scroll"><table><thead><tr><th>kind</th><th>to</th><th>on</th><th>branches</th><th></th></tr></thead><tbody>${notificationRows}</tbody></table></div>` : html`<p class="muted">No notifications.</p>`}
${
  canChangeSecrets
    ? html`<form method="post" action="${base}/notifications" data-form="notification">${csrf}
<p><label for="n-kind">Kind</label><br>${select('kind', 'n-kind', NOTIFICATION_KIND_CHOICES, 'webhook')}</p>
<p><label for="n-url">URL</label> <span class="muted">(webhook and Slack; stored sealed, shown as its origin only)</span><br><input id="n-url" name="url" maxlength="2000" autocomplete="off" placeholder="https://hooks.slack.com/services/…"></p>
<p><label for="n-to">Addresses</label> <span class="muted">(email; separated by spaces, commas or lines)</span><br><textarea id="n-to" name="to" rows="2" cols="60" maxlength="8000"></textarea></p>
<p>When a job${NOTIFICATION_EVENT_CHOICES.map(([value, label]) => html` <input type="checkbox" style="width:auto" id="n-on-${value}" name="on" value="${value}"${value === 'failed' ? ' checked' : ''}> <label for="n-on-${value}">${label}</label>`)}</p>
<p><label for="n-branches">Branch patterns</label> <span class="muted">(one per line, <code>*</code> matches within a segment; empty: every branch)</span><br><textarea id="n-branches" name="branches" rows="3" cols="60" maxlength="30000"></textarea></p>
<p><button type="submit">Add notification</button></p></form>`
    : ''
}`;

  const scheduleRows = schedules.map((s) => {
    const key = `sch-${s.name}`;
    const facts = html`<td><code>${s.cron}</code> ${s.timezone}</td><td>${s.ref ?? 'default branch'}</td><td data-schedule-state>${s.enabled ? 'on' : 'paused'}</td><td>${s.next_run_at ? timeEl(s.next_run_at, now) : '–'}</td><td>${s.last_error ?? ''}</td>`;
    const edit = canChange
      ? html`<tr><td colspan="6"><form method="post" action="${base}/schedules/${enc(s.name)}" data-form="schedule-edit" data-for="${s.name}">${csrf}
<label for="${key}-cron">cron</label> <input id="${key}-cron" name="cron" value="${s.cron}" required maxlength="200" size="16" style="width:auto">
<label for="${key}-tz">time zone</label> <input id="${key}-tz" name="timezone" value="${s.timezone}" required maxlength="100" size="14" style="width:auto">
<label for="${key}-ref">ref</label> <input id="${key}-ref" name="ref" value="${s.ref ?? ''}" maxlength="1024" size="14" style="width:auto" placeholder="default branch">
<input type="checkbox" style="width:auto" id="${key}-on" name="enabled" value="on"${s.enabled ? ' checked' : ''}> <label for="${key}-on">on</label>
<button type="submit">Save</button></form>
<form method="post" action="${base}/schedules/${enc(s.name)}/delete" class="inline">${csrf}<button type="submit" data-delete-schedule="${s.name}">Delete</button></form></td></tr>`
      : '';
    return html`<tr data-schedule="${s.name}"><td>${s.name}</td>${facts}</tr>${edit}`;
  });
  const schedulesPart = html`<h2 id="schedules">Schedules</h2>
${schedules.length ? html`<div class="scroll"><table><thead><tr><th>name</th><th>when</th><th>ref</th><th>state</th><th>next</th><th>last error</th></tr></thead><tbody>${scheduleRows}</tbody></table></div>` : html`<p class="muted">No schedules.</p>`}
${
  canChange
    ? html`<form method="post" action="${base}/schedules" data-form="schedule">${csrf}
<p><label for="new-sch-name">Name</label><br><input id="new-sch-name" name="name" required maxlength="63"></p>
<p><label for="new-sch-cron">cron (five fields)</label><br><input id="new-sch-cron" name="cron" required maxlength="200" placeholder="0 3 * * *"></p>
<p><label for="new-sch-tz">Time zone</label><br><input id="new-sch-tz" name="timezone" value="UTC" required maxlength="100"></p>
<p><label for="new-sch-ref">Branch or ref</label><br><input id="new-sch-ref" name="ref" maxlength="1024" placeholder="default branch"></p>
<p><button type="submit">Add schedule</button></p></form>`
    : ''
}`;

  const workerRows = workers.map((w) => {
    const shared = w.projects === '*' || w.projects.length !== 1;
    const scope =
      w.projects === '*'
        ? 'every project'
        : w.projects.length === 1
          ? 'this project only'
          : `${w.projects.length} projects`;
    const revoke =
      canChange && (isAdminToken || !shared)
        ? html`<form method="post" action="${base}/workers/${enc(w.id)}/revoke" class="inline">${csrf}<button type="submit" data-revoke-worker="${w.name}">Revoke</button></form>`
        : canChange
          ? html`<span class="muted">serves other projects: the admin token revokes it</span>`
          : '';
    return html`<tr data-worker="${w.name}"><td>${w.name}</td><td>${w.untrusted ? 'untrusted' : 'trusted'}${w.ephemeral ? ', one task' : ''}</td><td>${w.labels.join(', ')}</td><td>${scope}</td><td>${w.last_seen_at ? timeEl(w.last_seen_at, now) : 'never'}</td><td>${revoke}</td></tr>`;
  });
  const workersPart = html`<h2 id="workers">Workers</h2>
${workers.length ? html`<div class="scroll"><table><thead><tr><th>worker</th><th>pool</th><th>labels</th><th>claims tasks of</th><th>last seen</th><th></th></tr></thead><tbody>${workerRows}</tbody></table></div>` : html`<p class="muted">No worker may claim this project's tasks.</p>`}`;

  const deletePart = canChange
    ? html`<h2 id="delete">Delete the project</h2><p>Its jobs, logs, secrets and schedules go with it${project.hook_made ? ', and the webhook Conductor made at the forge' : ''}.</p>
<form method="post" action="/projects/${enc(id)}/delete" data-form="delete">${csrf}
<p><label for="confirm-id">Type the project's id (${id}) to confirm</label><br><input id="confirm-id" name="confirm" required maxlength="63" autocomplete="off"></p>
<p><button type="submit">Delete ${id}</button></p></form>`
    : '';

  const body = html`<p><a href="/projects/${enc(id)}">← ${project.name}</a></p>
<h1>Settings <span class="muted">${project.forge} ${project.repo}</span></h1>
${notice ? html`<p class="notice" role="status" data-notice>${notice}</p>` : ''}
${canChange ? '' : html`<p class="muted" data-read-only>Changing these settings needs admin access to ${project.repo}.</p>`}
<h2 id="general">General</h2>${general}
${secretsPart}${notificationsPart}${schedulesPart}${workersPart}${deletePart}`;
  return page({ title: `Settings · ${id}`, body, signedIn: true, csrf: viewer.csrf });
}

/** May the signed-in person take `action` here: the refusal's reply, or null. */
async function refusal(
  ctx: AppContext,
  people: PeopleGate,
  person: Person,
  id: string,
  action: Action,
  viewer: ReturnType<typeof viewerOf>,
): Promise<Reply | null> {
  const decision = await people.may(ctx, person, id, action);
  return decision.allowed ? null : refused(decision.status, decision.reason, viewer);
}

/** A settings form: session, CSRF, permission for `action`, then `change`; back to the page. */
function settingsForm(
  action: Action,
  change: (
    ctx: AppContext,
    admin: ProjectAdmin,
    id: string,
    fields: URLSearchParams,
    person: Person,
    event: HttpEvent,
  ) => Promise<string | { notice: string | Html } | Reply>,
): AdminPageRoute {
  return asAdminPage(async (event, ctx, admin, people) => {
    const id = pathParam(event, 'id');
    const got = await formOf(event, ctx);
    if ('reply' in got) return got.reply;
    const viewer = viewerOf(ctx, got.session);
    const no = await refusal(ctx, people, got.person, id, action, viewer);
    if (no) return no;
    const done = await change(ctx, admin, id, got.fields, got.person, event);
    if (typeof done === 'string') return redirect(`${settingsPath(id)}?saved=${done}`);
    if ('notice' in done) {
      return htmlReply(
        200,
        await renderSettings(
          ctx,
          admin,
          id,
          { signedIn: true, csrf: got.csrf },
          true,
          got.person.kind === 'admin',
          done.notice,
        ),
      );
    }
    return done;
  });
}

const on = (fields: URLSearchParams, name: string) => fields.get(name) === 'on';
const text = (fields: URLSearchParams, name: string) => fields.get(name) ?? '';

/** Every settings route by its route key (lib/http/routes.ts). */
export const SETTINGS_ROUTES: Record<string, AdminPageRoute> = {
  'GET /projects/{id}/settings': asAdminPage(async (event, ctx, admin, people) => {
    const id = pathParam(event, 'id');
    const who = await signedInAs(event, ctx);
    if (!who) return toLogin(event);
    const viewer = viewerOf(ctx, who.session);
    const no = await refusal(ctx, people, who.person, id, 'see_settings', viewer);
    if (no) return no;
    const canChange = (await people.may(ctx, who.person, id, 'settings')).allowed;
    const canChangeSecrets = (await people.may(ctx, who.person, id, 'secrets')).allowed;
    const saved = event.queryStringParameters?.saved;
    return htmlReply(
      200,
      await renderSettings(
        ctx,
        admin,
        id,
        { signedIn: true, csrf: csrfToken(ctx.keyring, who.session) },
        canChange,
        who.person.kind === 'admin',
        saved !== undefined ? (SAVED[saved] ?? null) : null,
        canChangeSecrets,
      ),
    );
  }),
  'POST /projects/{id}/settings': settingsForm('settings', async (ctx, admin, id, f, person) => {
    await admin.update(
      ctx,
      id,
      {
        fork_pull_requests: text(f, 'fork_pull_requests'),
        bot_pull_requests: text(f, 'bot_pull_requests'),
        visibility: text(f, 'visibility'),
        cancel_superseded: on(f, 'cancel_superseded'),
        enabled: on(f, 'enabled'),
        org_groups: text(f, 'org_groups')
          .split(/[\s,]+/)
          .filter(Boolean),
      },
      person,
    );
    return 'general';
  }),
  'POST /projects/{id}/settings/secrets': settingsForm(
    'secrets',
    async (ctx, admin, id, f, person) => {
      const name = text(f, 'name').trim();
      const { warning } = await admin.putSecret(ctx, id, name, text(f, 'value'), person);
      return warning ? { notice: `${SAVED.secret} Note: ${warning}.` } : 'secret';
    },
  ),
  'POST /projects/{id}/settings/secrets/{name}/delete': settingsForm(
    'secrets',
    async (ctx, admin, id, _f, person, event) => {
      await admin.deleteSecret(ctx, id, pathParam(event, 'name'), person);
      return 'secret-deleted';
    },
  ),
  'POST /projects/{id}/settings/notifications': settingsForm(
    'secrets',
    async (ctx, admin, id, f, person) => {
      const kind = text(f, 'kind');
      const branches = text(f, 'branches')
        .split(/\r?\n/)
        .map((b) => b.trim())
        .filter(Boolean);
      const { secret } = await admin.createNotification(
        ctx,
        id,
        {
          kind,
          ...(kind === 'email'
            ? {
                to: text(f, 'to')
                  .split(/[\s,;]+/)
                  .filter(Boolean),
              }
            : text(f, 'url').trim()
              ? { url: text(f, 'url').trim() }
              : {}),
          on: f.getAll('on'),
          ...(branches.length ? { branches } : {}),
        },
        person,
      );
      if (!secret) return 'notification';
      return {
        notice: html`${SAVED.notification} Its signing secret, shown this once (each delivery's <code>X-Conductor-Signature-256</code> header is <code>sha256=</code> and the hex HMAC-SHA256 of its body with it): <code data-notification-secret>${secret}</code>`,
      };
    },
  ),
  'POST /projects/{id}/settings/notifications/{nid}/delete': settingsForm(
    'secrets',
    async (ctx, admin, id, _f, person, event) => {
      await admin.deleteNotification(ctx, id, pathParam(event, 'nid'), person);
      return 'notification-deleted';
    },
  ),
  'POST /projects/{id}/settings/schedules': settingsForm(
    'schedules',
    async (ctx, admin, id, f, person) => {
      const ref = text(f, 'ref').trim();
      await admin.createSchedule(
        ctx,
        id,
        {
          name: text(f, 'name').trim(),
          cron: text(f, 'cron'),
          timezone: text(f, 'timezone').trim() || 'UTC',
          ...(ref ? { ref } : {}),
        },
        person,
      );
      return 'schedule';
    },
  ),
  'POST /projects/{id}/settings/schedules/{name}': settingsForm(
    'schedules',
    async (ctx, admin, id, f, person, event) => {
      const ref = text(f, 'ref').trim();
      await admin.changeSchedule(
        ctx,
        id,
        pathParam(event, 'name'),
        {
          cron: text(f, 'cron'),
          timezone: text(f, 'timezone').trim(),
          ref: ref || null,
          enabled: on(f, 'enabled'),
        },
        person,
      );
      return 'schedule';
    },
  ),
  'POST /projects/{id}/settings/schedules/{name}/delete': settingsForm(
    'schedules',
    async (ctx, admin, id, _f, person, event) => {
      await admin.removeSchedule(ctx, id, pathParam(event, 'name'), person);
      return 'schedule-deleted';
    },
  ),
  'POST /projects/{id}/settings/workers/{worker}/revoke': settingsForm(
    'workers',
    async (ctx, admin, id, _f, person, event) => {
      await admin.revokeWorker(ctx, id, pathParam(event, 'worker'), person);
      return 'worker';
    },
  ),
  'POST /projects/{id}/delete': settingsForm('settings', async (ctx, admin, id, f, person) => {
    if (text(f, 'confirm').trim() !== id) {
      throw new ValidationError([
        {
          path: 'confirm',
          message: `type the project's id (${id}) to delete it; nothing was deleted`,
        },
      ]);
    }
    const { left } = await admin.removeProject(ctx, id, person);
    if (left) {
      return htmlReply(
        200,
        page({
          title: 'Deleted',
          body: html`<h1>Deleted</h1><p data-notice>Project ${id} is deleted, but the ${left}.</p><p><a href="/">Back to the projects</a></p>`,
          signedIn: true,
        }),
      );
    }
    return redirect('/?deleted=1');
  }),
};
