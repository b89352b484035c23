// Adding a project from the page and a project's settings in the browser (issue #53), in
// Chromium, against a fake Gitea on loopback (sign-in, permission API, repository list and
// webhooks, each checking Conductor's token): an administrator of a repository adds it, the
// hook is made at Gitea with the URL, JSON and a secret that signs deliveries; each settings
// form changes what it says and is audited; a writer sees the page without forms, a reader
// gets a 403, and a form without its CSRF token is refused; deleting the project deletes
// the hook.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import type { Page } from 'playwright-core';
import { sendWebhook, startE2E } from '../e2e/calls.ts';
import { giteaPush } from '../forge/fixtures/gitea.ts';
import { startFakeOAuth } from '../helpers/fake-oauth.ts';
import { launchBrowser, newPage, screenshot } from './support.ts';

const TOKEN = 'conductor-gitea-token-0123456789';
const oauth = await startFakeOAuth();
const e2e = await startE2E(import.meta.filename, {
  env: {
    CONDUCTOR_GITEA_URL: oauth.url,
    CONDUCTOR_GITEA_CLIENT_ID: oauth.clientId,
    CONDUCTOR_GITEA_CLIENT_SECRET: oauth.clientSecret,
    CONDUCTOR_GITEA_TOKEN: TOKEN,
  },
});
oauth.fallback = e2e.fake.url;
const { stack, fake } = e2e;
fake.repositoryToken = TOKEN;
fake.addRepository('acme/tea', { admin: true, private: true });
fake.addRepository('acme/other', { admin: true });
fake.addRepository('acme/hookless', { admin: true });
// The token may read but not administer this one: it cannot make its hook, so it is not offered.
fake.addRepository('acme/readonly', { admin: false });
oauth.setPermission('acme/tea', 'ada', 'admin');
oauth.setPermission('acme/readonly', 'ada', 'admin');
oauth.setPermission('acme/other', 'ada', 'write');
oauth.setPermission('acme/hookless', 'ada', 'admin');
oauth.setPermission('acme/tea', 'wes', 'write');
oauth.setPermission('acme/tea', 'rita', 'read');
const browser = await launchBrowser();

async function signInWithGitea(login: string, next = '/'): Promise<Page> {
  oauth.signInAs = login;
  const { page } = await newPage(browser);
  await page.goto(`${stack.url}/login?next=${encodeURIComponent(next)}`);
  await Promise.all([
    page.waitForURL((u) => u.pathname === next),
    page.click('[data-sign-in="gitea"]'),
  ]);
  return page;
}

const mainText = async (page: Page) => (await page.locator('main').textContent()) ?? '';

async function auditOf(
  projectId: string,
): Promise<{ actor: string; action: string; detail: string }[]> {
  const res = await stack.call('GET', `/v1/projects/${projectId}/audit?limit=100`, {
    token: stack.adminToken,
  });
  assert.equal(res.status, 200, res.text);
  return res.body.events;
}

test('an administrator adds a Gitea repository from the page: the project is made and its hook at Gitea signs deliveries', async () => {
  const page = await signInWithGitea('ada');
  await page.click('[data-add-project]');
  assert.equal(new URL(page.url()).pathname, '/repositories');
  // Only what ada administers and Conductor's token may manage.
  assert.deepEqual(
    await page
      .locator('[data-repo]')
      .evaluateAll((rows) => rows.map((r) => r.getAttribute('data-repo'))),
    ['acme/hookless', 'acme/tea'],
  );
  await screenshot(page, 'onboard-repositories');
  const form = page.locator('form[data-add="acme/tea"]');
  assert.equal(await form.locator('input[name=id]').inputValue(), 'tea');
  await Promise.all([
    page.waitForURL((u) => u.pathname === '/projects/tea/settings'),
    form.locator('button[type=submit]').click(),
  ]);
  assert.match((await page.locator('[data-notice]').textContent()) ?? '', /webhook is set up/);

  // The hook at Gitea: Conductor's webhook route, JSON, push and pull requests, made with the token.
  const hooks = [...fake.hooks.values()];
  assert.equal(hooks.length, 1);
  const hook = hooks[0]!;
  assert.equal(hook.repo, 'acme/tea');
  assert.equal(hook.url, `${stack.url}/v1/webhooks/gitea`);
  assert.equal(hook.contentType, 'json');
  assert.deepEqual(hook.events, ['push', 'pull_request']);
  assert.equal(hook.authorization, `token ${TOKEN}`);
  // The forge was asked about ada with Conductor's token, not a guess.
  assert.ok(
    oauth.permissionRequests.some(
      (r) => r.repo === 'acme/tea' && r.login === 'ada' && r.authorization === `token ${TOKEN}`,
    ),
  );
  // The secret is the project's: a delivery Gitea signs with it makes a job; another is refused.
  const push = giteaPush('acme/tea', 'a'.repeat(40));
  const accepted = await sendWebhook(stack, 'gitea', 'push', push, { secret: hook.secret });
  assert.equal(accepted.status, 202, accepted.text);
  const forged = await sendWebhook(stack, 'gitea', 'push', giteaPush('acme/tea', 'b'.repeat(40)), {
    secret: 'not-the-secret-0123456789',
  });
  assert.equal(forged.status, 401);
  // Never shown on the page.
  assert.doesNotMatch(await page.content(), new RegExp(hook.secret));

  const project = await stack.call('GET', '/v1/projects/tea', { token: stack.adminToken });
  assert.equal(project.body.project.forge, 'gitea');
  assert.equal(project.body.project.forge_url, oauth.url);
  assert.equal(project.body.project.has_forge_token, true);
  assert.equal(project.body.project.visibility, 'private');
  const installation = await stack.call('GET', '/v1/audit?limit=50', { token: stack.adminToken });
  const actions = installation.body.events
    .filter((e: { subject: string }) => e.subject === 'tea')
    .map((e: { actor: string; action: string }) => `${e.action} by ${e.actor}`);
  assert.ok(actions.includes('project.create by @ada'), JSON.stringify(actions));
  assert.ok(actions.includes('project.hook by @ada'), JSON.stringify(actions));

  // Added, it is shown as such; ada may not add what she only writes to.
  await page.goto(`${stack.url}/repositories`);
  assert.match((await page.locator('[data-repo="acme/tea"]').textContent()) ?? '', /added as tea/);
  const refused = await page.evaluate(
    async (csrf) => {
      const res = await fetch('/repositories', {
        method: 'POST',
        headers: { 'content-type': 'application/x-www-form-urlencoded' },
        body: new URLSearchParams({ csrf, forge: 'gitea', repo: 'acme/other' }).toString(),
      });
      return { status: res.status, text: await res.text() };
    },
    await page.locator('input[name=csrf]').first().inputValue(),
  );
  assert.equal(refused.status, 403);
  assert.match(
    refused.text,
    /@ada has write access to acme\/other; adding it as a project needs admin access/,
  );
  assert.equal(fake.hooks.size, 1);
});

test('a hook the forge refuses to make adds nothing, and the page says why', async () => {
  const page = await signInWithGitea('ada', '/repositories');
  fake.refuseHooks = 422;
  try {
    const [res] = await Promise.all([
      page.waitForResponse(
        (r) => r.url().endsWith('/repositories') && r.request().method() === 'POST',
      ),
      page.locator('form[data-add="acme/hookless"] button[type=submit]').click(),
    ]);
    assert.equal(res.status(), 409);
    await page.waitForLoadState();
    assert.match(
      await mainText(page),
      /Gitea did not make the webhook \(Gitea answered HTTP 422 asking to create a webhook of acme\/hookless\): nothing was added/,
    );
  } finally {
    fake.refuseHooks = null;
  }
  const gone = await stack.call('GET', '/v1/projects/hookless', { token: stack.adminToken });
  assert.equal(gone.status, 404);
  assert.equal(fake.hooks.size, 1, "only tea's hook");
});

test('each settings form changes what it says, and every change is audited with who did it', async () => {
  const page = await signInWithGitea('ada', '/projects/tea/settings');
  // Policies, visibility and org: groups.
  await page.selectOption('#s-fork', 'run');
  await page.selectOption('#s-visibility', 'public');
  await page.fill('#s-org', 'deploy, Nightly');
  await Promise.all([
    page.waitForURL((u) => u.search === '?saved=general'),
    page.click('form[data-form=general] button[type=submit]'),
  ]);
  const after = (await stack.call('GET', '/v1/projects/tea', { token: stack.adminToken })).body
    .project;
  assert.equal(after.fork_pull_requests, 'run');
  assert.equal(after.visibility, 'public');
  assert.deepEqual(after.org_groups, ['deploy', 'nightly']);
  assert.equal(await page.locator('#s-fork').inputValue(), 'run');
  // Joining an org: group another project is in lets this one's pipelines cancel that one's
  // jobs: the admin token's to decide.
  const other = await stack.call('POST', '/v1/projects', {
    token: stack.adminToken,
    body: {
      id: 'ops',
      name: 'ops',
      forge: 'gitea',
      repo: 'acme/ops',
      repo_url: 'https://gitea.example/acme/ops.git',
      forge_url: oauth.url,
      org_groups: ['shared'],
    },
  });
  assert.equal(other.status, 201, other.text);
  await page.fill('#s-org', 'deploy, nightly, shared');
  const [joined] = await Promise.all([
    page.waitForResponse((r) => r.url().endsWith('/projects/tea/settings')),
    page.click('form[data-form=general] button[type=submit]'),
  ]);
  assert.equal(joined.status(), 403);
  await page.waitForLoadState();
  assert.match(await mainText(page), /org_groups: org:shared is used by another project/);
  const still = (await stack.call('GET', '/v1/projects/tea', { token: stack.adminToken })).body
    .project;
  assert.deepEqual(still.org_groups, ['deploy', 'nightly']);
  await page.goto(`${stack.url}/projects/tea/settings`);

  // A secret: set, listed by name, its value never shown; then deleted.
  await page.fill('#secret-name', 'DEPLOY_KEY');
  await page.fill('#secret-value', 'value-that-must-never-show-0123');
  await Promise.all([
    page.waitForURL((u) => u.search === '?saved=secret'),
    page.click('form[data-form=secret] button[type=submit]'),
  ]);
  assert.equal(await page.locator('[data-secret="DEPLOY_KEY"]').count(), 1);
  assert.doesNotMatch(await page.content(), /value-that-must-never-show/);
  const secrets = await stack.call('GET', '/v1/projects/tea/secrets', { token: stack.adminToken });
  assert.deepEqual(
    secrets.body.secrets.map((s: { name: string }) => s.name),
    ['DEPLOY_KEY'],
  );
  await Promise.all([
    page.waitForURL((u) => u.search === '?saved=secret-deleted'),
    page.click('[data-delete-secret="DEPLOY_KEY"]'),
  ]);
  assert.equal(await page.locator('[data-secret]').count(), 0);

  // A schedule: made, edited (paused), and a bad cron named.
  await page.fill('#new-sch-name', 'nightly');
  await page.fill('#new-sch-cron', '0 3 * * *');
  await page.fill('#new-sch-tz', 'Europe/Paris');
  await Promise.all([
    page.waitForURL((u) => u.search === '?saved=schedule'),
    page.click('form[data-form=schedule] button[type=submit]'),
  ]);
  assert.equal(
    await page.locator('[data-schedule="nightly"] [data-schedule-state]').textContent(),
    'on',
  );
  const edit = page.locator('form[data-form="schedule-edit"][data-for="nightly"]');
  await edit.locator('input[name=cron]').fill('30 4 * * 1');
  await edit.locator('input[name=enabled]').uncheck();
  await Promise.all([
    page.waitForURL((u) => u.search === '?saved=schedule'),
    edit.locator('button[type=submit]').click(),
  ]);
  assert.equal(
    await page.locator('[data-schedule="nightly"] [data-schedule-state]').textContent(),
    'paused',
  );
  const schedules = await stack.call('GET', '/v1/projects/tea/schedules', {
    token: stack.adminToken,
  });
  assert.equal(schedules.body.schedules[0].cron, '30 4 * * 1');
  assert.equal(schedules.body.schedules[0].timezone, 'Europe/Paris');
  assert.equal(schedules.body.schedules[0].enabled, false);
  await page.fill('#new-sch-name', 'broken');
  await page.fill('#new-sch-cron', 'every day');
  const [bad] = await Promise.all([
    page.waitForResponse((r) => r.url().endsWith('/projects/tea/settings/schedules')),
    page.click('form[data-form=schedule] button[type=submit]'),
  ]);
  assert.equal(bad.status(), 400);
  await page.waitForLoadState();
  assert.match(await mainText(page), /^.*cron: /m);
  await page.goto(`${stack.url}/projects/tea/settings`);
  await Promise.all([
    page.waitForURL((u) => u.search === '?saved=schedule-deleted'),
    page.click('[data-delete-schedule="nightly"]'),
  ]);
  assert.equal(await page.locator('[data-schedule]').count(), 0);

  // Workers: its own may be revoked here; one for every project only with the admin token.
  const own = await stack.call('POST', '/v1/workers', {
    token: stack.adminToken,
    body: { name: 'tea-runner', labels: ['linux'], projects: ['tea'] },
  });
  const shared = await stack.call('POST', '/v1/workers', {
    token: stack.adminToken,
    body: { name: 'everyone-runner', labels: ['linux'] },
  });
  assert.equal(own.status, 201);
  assert.equal(shared.status, 201);
  await page.reload();
  assert.equal(await page.locator('[data-worker="tea-runner"]').count(), 1);
  assert.equal(await page.locator('[data-revoke-worker="everyone-runner"]').count(), 0);
  assert.match(
    (await page.locator('[data-worker="everyone-runner"]').textContent()) ?? '',
    /serves other projects/,
  );
  await screenshot(page, 'settings-admin');
  await Promise.all([
    page.waitForURL((u) => u.search === '?saved=worker'),
    page.click('[data-revoke-worker="tea-runner"]'),
  ]);
  assert.equal(await page.locator('[data-worker="tea-runner"]').count(), 0);
  const claim = await stack.call('POST', '/v1/runner/claim', { token: own.body.token, body: {} });
  assert.equal(claim.status, 401, 'the revoked token stopped working');
  // Revoking the shared one by its URL is refused, saying why.
  const sharedRevoke = await page.evaluate(
    async ([id, csrf]) => {
      const res = await fetch(`/projects/tea/settings/workers/${id}/revoke`, {
        method: 'POST',
        headers: { 'content-type': 'application/x-www-form-urlencoded' },
        body: new URLSearchParams({ csrf: csrf! }).toString(),
      });
      return { status: res.status, text: await res.text() };
    },
    [shared.body.worker.id, await page.locator('input[name=csrf]').first().inputValue()],
  );
  assert.equal(sharedRevoke.status, 403);
  assert.match(sharedRevoke.text, /claims tasks of other projects too/);

  const audit = (await auditOf('tea')).map((e) => `${e.action} by ${e.actor}: ${e.detail}`);
  for (const line of [
    /^settings by @ada: fork_pull_requests, visibility, org_groups$/,
    /^secret by @ada: DEPLOY_KEY set$/,
    /^secret by @ada: DEPLOY_KEY deleted$/,
    /^schedule create by @ada: nightly/,
    /^schedule update by @ada: nightly/,
    /^schedule delete by @ada: nightly$/,
  ]) {
    assert.ok(
      audit.some((a) => line.test(a)),
      `${line} in ${JSON.stringify(audit)}`,
    );
  }
  const installation = await stack.call('GET', '/v1/audit?limit=50', { token: stack.adminToken });
  assert.ok(
    installation.body.events.some(
      (e: { action: string; actor: string; subject: string }) =>
        e.action === 'worker.revoke' && e.actor === '@ada' && e.subject === own.body.worker.id,
    ),
  );
});

test('a writer sees the settings without forms and cannot change them; a reader gets a 403; a form without its CSRF token is refused', async () => {
  const writer = await signInWithGitea('wes', '/projects/tea');
  await Promise.all([
    writer.waitForURL((u) => u.pathname === '/projects/tea/settings'),
    writer.click('[data-settings-link]'),
  ]);
  assert.equal(await writer.locator('[data-read-only]').count(), 1);
  assert.equal(await writer.locator('form[data-form]').count(), 0);
  const csrf = await writer.locator('input[name=csrf]').first().inputValue();
  const post = (path: string, fields: Record<string, string>) =>
    writer.evaluate(
      async ([p, body]) => {
        const res = await fetch(p!, {
          method: 'POST',
          headers: { 'content-type': 'application/x-www-form-urlencoded' },
          body,
        });
        return { status: res.status, text: await res.text() };
      },
      [path, new URLSearchParams(fields).toString()],
    );
  const asWriter = await post('/projects/tea/settings/secrets', {
    csrf,
    name: 'STOLEN',
    value: 'x'.repeat(20),
  });
  assert.equal(asWriter.status, 403);
  assert.match(
    asWriter.text,
    /Gitea says @wes has write access to acme\/tea; changing the project&#39;s secrets needs admin access|Gitea says @wes has write access to acme\/tea; changing the project's secrets needs admin access/,
  );

  const reader = await signInWithGitea('rita', '/projects/tea');
  const res = await reader.goto(`${stack.url}/projects/tea/settings`);
  assert.equal(res?.status(), 403);
  assert.equal(await reader.locator('form[data-form]').count(), 0);
  assert.match(await mainText(reader), /seeing the project's settings needs write access/);

  // The administrator's own session, without the CSRF token: refused, nothing stored.
  const admin = await signInWithGitea('ada', '/projects/tea/settings');
  const forged = await admin.evaluate(async () => {
    const res = await fetch('/projects/tea/settings/secrets', {
      method: 'POST',
      headers: { 'content-type': 'application/x-www-form-urlencoded' },
      body: 'name=FORGED&value=forged-value-0123456789',
    });
    return res.status;
  });
  assert.equal(forged, 403);
  const secrets = await stack.call('GET', '/v1/projects/tea/secrets', { token: stack.adminToken });
  assert.deepEqual(secrets.body.secrets, []);
});

test('deleting the project from its settings deletes the hook at Gitea', async () => {
  const page = await signInWithGitea('ada', '/projects/tea/settings');
  await page.fill('#confirm-id', 'tea');
  await Promise.all([
    page.waitForURL((u) => u.pathname === '/'),
    page.click('form[data-form=delete] button'),
  ]);
  assert.equal(fake.hooks.size, 0, 'the hook is gone');
  const gone = await stack.call('GET', '/v1/projects/tea', { token: stack.adminToken });
  assert.equal(gone.status, 404);
  const installation = await stack.call('GET', '/v1/audit?limit=50', { token: stack.adminToken });
  assert.ok(
    installation.body.events.some(
      (e: { action: string; actor: string; detail: string }) =>
        e.action === 'project.hook' && e.actor === '@ada' && /deleted at Gitea/.test(e.detail),
    ),
  );
});
