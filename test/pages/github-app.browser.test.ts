// Adding a project from the page when the GitHub App is configured (issue #53), in Chromium:
// sign-in goes through the fake OAuth provider (which answers GitHub's permission API and
// passes every other call on), and the rest to the fake GitHub of the app
// (test/helpers/fake-github-app.ts), which checks the app's JWT and its installation tokens.
// The page offers the repositories the app is installed on that GitHub says the person
// administers; adding one makes a project served by the app, with no webhook made and no
// token of its own, whose pushes the app's deliveries build; deleting it deletes no hook.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import type { Page } from 'playwright-core';
import { sendWebhook, startE2E } from '../e2e/calls.ts';
import { pipeline, sha } from '../e2e/payloads.ts';
import { githubPush } from '../forge/fixtures/github.ts';
import { installationEvent } from '../forge/fixtures/github-app.ts';
import { startFakeGitHubApp } from '../helpers/fake-github-app.ts';
import { startFakeOAuth } from '../helpers/fake-oauth.ts';
import { launchBrowser, newPage, screenshot } from './support.ts';

const app = await startFakeGitHubApp();
const oauth = await startFakeOAuth();
oauth.fallback = app.url;
const { stack } = await startE2E(import.meta.filename, {
  env: {
    CONDUCTOR_GITHUB_CLIENT_ID: oauth.clientId,
    CONDUCTOR_GITHUB_CLIENT_SECRET: oauth.clientSecret,
    CONDUCTOR_GITHUB_OAUTH_URL: oauth.url,
    CONDUCTOR_GITHUB_API_URL: oauth.url,
    CONDUCTOR_GITHUB_APP_ID: app.appId,
    CONDUCTOR_GITHUB_APP_PRIVATE_KEY_FILE: app.keyFile,
    CONDUCTOR_GITHUB_APP_WEBHOOK_SECRET: app.webhookSecret,
  },
});
const INSTALLATION = 301;
const installed = ['acme/app-api', 'acme/app-docs', 'acme/app-web'];
app.install(INSTALLATION, installed);
app.setPublic('acme/app-docs');
const delivered = await sendWebhook(
  stack,
  'github',
  'installation',
  installationEvent('created', INSTALLATION, installed),
  { secret: app.webhookSecret },
);
assert.equal(delivered.status, 200, delivered.text);
oauth.setPermission('acme/app-web', 'grace', 'admin');
oauth.setPermission('acme/app-docs', 'grace', 'admin');
oauth.setPermission('acme/app-api', 'grace', 'write');
// Administered by grace, but the app is not installed on it.
oauth.setPermission('acme/elsewhere', 'grace', 'admin');
const browser = await launchBrowser();

async function signInWithGitHub(login: string, next: string): Promise<Page> {
  oauth.signInAs = login;
  const { page } = await newPage(browser);
  await page.goto(`${stack.url}/login?next=${encodeURIComponent(next)}`);
  await Promise.all([
    page.waitForURL((u) => u.pathname === next),
    page.click('[data-sign-in="github"]'),
  ]);
  return page;
}

const hookCalls = () => app.calls.filter((c) => /\/hooks(\/|$)/.test(c.path));

/** Posts the Add form from the page's session without its CSRF token, as another site could. */
function postWithoutCsrf(page: Page, repo: string) {
  return page.evaluate(async (r) => {
    const res = await fetch('/repositories', {
      method: 'POST',
      headers: { 'content-type': 'application/x-www-form-urlencoded' },
      body: new URLSearchParams({ forge: 'github', repo: r }).toString(),
    });
    return res.status;
  }, repo);
}

test('with the GitHub App, the page offers the installed repositories a person administers; adding one makes a project the app serves, with no webhook', async () => {
  const page = await signInWithGitHub('grace', '/');
  await Promise.all([
    page.waitForURL((u) => u.pathname === '/repositories'),
    page.click('[data-add-project]'),
  ]);
  assert.deepEqual(
    await page
      .locator('[data-repo]')
      .evaluateAll((rows) => rows.map((r) => r.getAttribute('data-repo'))),
    ['acme/app-docs', 'acme/app-web'],
    'those the app is installed on that GitHub says grace administers',
  );
  assert.match(
    (await page.locator('[data-app]').textContent()) ?? '',
    /GitHub App is installed on.*no webhook is made/,
  );
  // GitHub was asked about grace with a token of the app's installation.
  const tokens = new Set(
    app.mints.filter((m) => m.installation === INSTALLATION).map((m) => `Bearer ${m.token}`),
  );
  const asked = oauth.permissionRequests.filter(
    (r) => r.repo === 'acme/app-web' && r.login === 'grace',
  );
  assert.ok(asked.length > 0);
  assert.ok(
    asked.every((r) => tokens.has(r.authorization ?? '')),
    JSON.stringify(asked),
  );
  await screenshot(page, 'onboard-github-app');

  const form = page.locator('form[data-add="acme/app-web"]');
  assert.equal(await form.locator('input[name=id]').inputValue(), 'app-web');
  await Promise.all([
    page.waitForURL((u) => u.pathname === '/projects/app-web/settings'),
    form.locator('button[type=submit]').click(),
  ]);
  assert.match(
    (await page.locator('[data-notice]').textContent()) ?? '',
    /the GitHub App delivers its pushes and pull requests and shows its jobs as check runs/,
  );
  // The app's tokens are never a runner's: a private repository's clone needs a token set.
  assert.match(
    (await page.locator('[data-notice]').textContent()) ?? '',
    /Its repository is private: runners clone with the project's forge token, which it does not have yet/,
  );
  assert.deepEqual(hookCalls(), [], 'no webhook is made at GitHub');
  // The repository was read with the installation's token.
  const read = app.calls.find((c) => c.method === 'GET' && c.path === '/repos/acme/app-web');
  assert.equal(read?.answered, 200);
  assert.equal(read?.installation, INSTALLATION);

  const project = (await stack.call('GET', '/v1/projects/app-web', { token: stack.adminToken }))
    .body.project;
  assert.equal(project.github_app, true);
  assert.equal(project.has_forge_token, false, 'tokens come from the installation');
  assert.equal(project.visibility, 'private', 'as GitHub says the repository is');
  assert.equal(project.commit_statuses, 'on: check runs through the GitHub App');

  // The app's delivery of a push builds it: no project secret is involved.
  const commit = sha('app-web-push');
  app.setFile('acme/app-web', commit, pipeline('app-web', '  a:\n    script: [make]\n'));
  const push = await sendWebhook(
    stack,
    'github',
    'push',
    { ...githubPush('acme/app-web', commit), installation: { id: INSTALLATION } },
    { secret: app.webhookSecret },
  );
  assert.equal(push.status, 202, push.text);

  // Shown as added; what grace only writes to, or what the app is not installed on, is refused.
  await page.goto(`${stack.url}/repositories`);
  assert.match(
    (await page.locator('[data-repo="acme/app-web"]').textContent()) ?? '',
    /added as app-web/,
  );
  const csrf = await page.locator('input[name=csrf]').first().inputValue();
  const withCsrf = (repo: string) =>
    page.evaluate(
      async ([r, c]) => {
        const res = await fetch('/repositories', {
          method: 'POST',
          headers: { 'content-type': 'application/x-www-form-urlencoded' },
          body: new URLSearchParams({ csrf: c!, forge: 'github', repo: r! }).toString(),
        });
        return { status: res.status, text: await res.text() };
      },
      [repo, csrf],
    );
  const writer = await withCsrf('acme/app-api');
  assert.equal(writer.status, 403, writer.text);
  assert.match(
    writer.text,
    /@grace has write access to acme\/app-api; adding it as a project needs admin access/,
  );
  const elsewhere = await withCsrf('acme/elsewhere');
  assert.equal(elsewhere.status, 409, elsewhere.text);
  assert.match(elsewhere.text, /The GitHub App is not installed on acme\/elsewhere/);
  // Without its CSRF token, nothing is added.
  assert.equal(await postWithoutCsrf(page, 'acme/app-docs'), 403);
  for (const id of ['app-api', 'elsewhere', 'app-docs']) {
    const res = await stack.call('GET', `/v1/projects/${id}`, { token: stack.adminToken });
    assert.equal(res.status, 404, id);
  }
});

test('the admin token sees every repository the app is installed on, and adds a public one', async () => {
  const { page } = await newPage(browser);
  await page.goto(`${stack.url}/login`);
  await page.fill('input[name=token]', stack.adminToken);
  await Promise.all([
    page.waitForURL((u) => u.pathname === '/'),
    page.click('form[action="/login"] button'),
  ]);
  await page.goto(`${stack.url}/repositories`);
  assert.deepEqual(
    await page
      .locator('[data-repo]')
      .evaluateAll((rows) => rows.map((r) => r.getAttribute('data-repo'))),
    installed,
  );
  await Promise.all([
    page.waitForURL((u) => u.pathname === '/projects/app-docs/settings'),
    page.click('form[data-add="acme/app-docs"] button[type=submit]'),
  ]);
  const notice = (await page.locator('[data-notice]').textContent()) ?? '';
  assert.match(notice, /the GitHub App delivers its pushes and pull requests/);
  assert.doesNotMatch(notice, /private/);
  const project = (await stack.call('GET', '/v1/projects/app-docs', { token: stack.adminToken }))
    .body.project;
  assert.equal(project.github_app, true);
  assert.equal(project.visibility, 'public');
  assert.deepEqual(hookCalls(), []);
});

test('deleting a project the app serves deletes no webhook', async () => {
  const page = await signInWithGitHub('grace', '/projects/app-web/settings');
  assert.doesNotMatch(
    (await page.locator('#delete + p').textContent()) ?? '',
    /webhook/,
    'no webhook to delete is promised',
  );
  await page.fill('#confirm-id', 'app-web');
  await Promise.all([
    page.waitForURL((u) => u.pathname === '/'),
    page.click('form[data-form=delete] button'),
  ]);
  const gone = await stack.call('GET', '/v1/projects/app-web', { token: stack.adminToken });
  assert.equal(gone.status, 404);
  assert.deepEqual(hookCalls(), [], 'GitHub was asked to delete no hook');
  const audit = await stack.call('GET', '/v1/audit?limit=50', { token: stack.adminToken });
  const about = audit.body.events.filter((e: { subject: string }) => e.subject === 'app-web');
  assert.ok(about.some((e: { action: string }) => e.action === 'project.delete'));
  assert.ok(!about.some((e: { action: string }) => e.action === 'project.hook'));
});
