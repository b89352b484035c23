// Adding a project from the page (issue #53): `/repositories` lists the repositories the
// signed-in person administers on their forge (as far as Conductor's token for that forge can
// see; on GitHub with the GitHub App, those the app is installed on), each with an Add form;
// adding one makes the project and its webhook at the forge (none with the app, whose own
// webhook serves it) (lib/app/onboarding.ts) and opens its settings.
import type { HttpEvent } from '../http/index.ts';
import { html, page } from './html.ts';
import { htmlReply, origin, redirect, signedInAs, toLogin, viewerOf } from './index.ts';
import { type AdminPageRoute, asAdminPage, formOf, type RepoOffer } from './settings.ts';

const enc = encodeURIComponent;

function renderOffers(offers: RepoOffer[], csrf: string): string {
  const parts = offers.map((offer) => {
    const rows = offer.repos.map(
      (r) =>
        html`<tr data-repo="${r.repo}"><td>${r.repo}</td><td>${r.private === null ? '' : r.private ? 'private' : 'public'}</td><td>${
          r.project
            ? html`added as <a href="/projects/${enc(r.project)}">${r.project}</a>`
            : html`<form method="post" action="/repositories" class="inline" data-add="${r.repo}"><input type="hidden" name="csrf" value="${csrf}"><input type="hidden" name="forge" value="${offer.forge}"><input type="hidden" name="repo" value="${r.repo}"><label>project id <input name="id" value="${r.suggestedId}" required maxlength="63" size="20" style="width:auto" pattern="[a-z0-9][a-z0-9-]{0,62}"></label> <button type="submit">Add</button></form>`
        }</td></tr>`,
    );
    const none = offer.app
      ? html`<p class="muted" data-none>No repository the GitHub App is installed on that you administer: install the app on the repository at GitHub, then reload.</p>`
      : html`<p class="muted" data-none>No repository here that you administer and Conductor's token can manage.</p>`;
    return html`<h2>${offer.title}</h2>
${offer.app ? html`<p data-app>The repositories the GitHub App is installed on. The app delivers their pushes and pull requests, and shows each job as a check run on the commit: no webhook is made.</p>` : ''}
${offer.notice ? html`<p class="notice" data-notice>${offer.notice}</p>` : ''}
${rows.length ? html`<div class="scroll"><table><thead><tr><th>repository</th><th></th><th></th></tr></thead><tbody>${rows}</tbody></table></div>` : offer.notice ? '' : none}`;
  });
  const body = html`<p><a href="/">← Projects</a></p><h1>Add a project</h1>
<p>Pick a repository you administer. Conductor makes the project and sets up the repository's webhook at the forge, with a fresh secret that nobody needs to copy; the project's pipeline is <code>.conductor.yml</code> at the repository's root.</p>
${parts.length ? parts : html`<p class="muted" data-none>No forge is set up for adding projects here (CONDUCTOR_GITHUB_TOKEN, CONDUCTOR_GITEA_TOKEN or CONDUCTOR_GITLAB_TOKEN): the admin token adds them with <code>conductor project create</code>.</p>`}`;
  return page({ title: 'Add a project', body, signedIn: true, csrf });
}

/** The Add page's routes by route key (lib/http/routes.ts). */
export const ONBOARD_ROUTES: Record<string, AdminPageRoute> = {
  'GET /repositories': asAdminPage(async (event, ctx, admin) => {
    const who = await signedInAs(event, ctx);
    if (!who) return toLogin(event);
    const viewer = viewerOf(ctx, who.session) as { signedIn: true; csrf: string };
    return htmlReply(200, renderOffers(await admin.repositories(ctx, who.person), viewer.csrf));
  }),
  'POST /repositories': asAdminPage(async (event: HttpEvent, ctx, admin) => {
    const got = await formOf(event, ctx);
    if ('reply' in got) return got.reply;
    const f = got.fields;
    const id = (f.get('id') ?? '').trim();
    const added = await admin.addProject(
      ctx,
      got.person,
      {
        forge: f.get('forge') ?? '',
        repo: f.get('repo') ?? '',
        ...(id ? { id } : {}),
      },
      // Where the forge delivers: this site (CONDUCTOR_PUBLIC_URL, else the request's host).
      origin(event, ctx),
    );
    const saved = !added.githubApp ? 'added' : added.private ? 'added-app-private' : 'added-app';
    return redirect(`/projects/${enc(added.projectId)}/settings?saved=${saved}`);
  }),
};
