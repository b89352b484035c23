// A project's notifications on its settings page (issue #54), in Chromium, against a fake Gitea
// on loopback (sign-in and permission API): an administrator of the repository adds a webhook
// notification through the form (its signing secret is shown this once; the page and the API
// list it by its URL's origin), a bad URL is refused naming the field, deleting removes it and
// every change is audited; a writer sees the list without forms and is refused a post; a post
// without the CSRF token is refused.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import type { Page } from 'playwright-core';
import { startE2E } from '../e2e/calls.ts';
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
oauth.setPermission('acme/tea', 'ada', 'admin');
oauth.setPermission('acme/tea', 'wes', 'write');
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

async function listed(): Promise<{ id: string; kind: string; url_host?: string }[]> {
  const res = await stack.call('GET', '/v1/projects/tea/notifications', {
    token: stack.adminToken,
  });
  assert.equal(res.status, 200, res.text);
  return res.body.notifications;
}

function poster(page: Page) {
  return (path: string, body: string) =>
    page.evaluate(
      async ([p, b]) => {
        const res = await fetch(p!, {
          method: 'POST',
          headers: { 'content-type': 'application/x-www-form-urlencoded' },
          body: b,
        });
        return { status: res.status, text: await res.text() };
      },
      [path, body],
    );
}

test('an administrator adds a webhook notification from the settings page: its secret is shown once, the page and the API list it, and deleting removes it', async () => {
  const page = await signInWithGitea('ada', '/repositories');
  await Promise.all([
    page.waitForURL((u) => u.pathname === '/projects/tea/settings'),
    page.locator('form[data-add="acme/tea"] button[type=submit]').click(),
  ]);
  assert.match((await page.locator('#notifications + p').textContent()) ?? '', /No notifications/);

  // A bad URL: refused, naming the field; nothing stored.
  const form = page.locator('form[data-form=notification]');
  await form.locator('select[name=kind]').selectOption('webhook');
  await form.locator('input[name=url]').fill('not a url');
  await Promise.all([
    page.waitForURL((u) => u.pathname === '/projects/tea/settings/notifications'),
    form.locator('button[type=submit]').click(),
  ]);
  assert.match((await page.locator('main').textContent()) ?? '', /url: must be an http\(s\) URL/);
  assert.deepEqual(await listed(), []);

  await page.goto(`${stack.url}/projects/tea/settings`);
  await form.locator('select[name=kind]').selectOption('webhook');
  await form.locator('input[name=url]').fill('https://hooks.example.com/x/very-secret-path');
  await form.locator('#n-on-fixed').check();
  await form.locator('textarea[name=branches]').fill('main\nrelease/*\n');
  await Promise.all([
    page.waitForURL((u) => u.pathname === '/projects/tea/settings/notifications'),
    form.locator('button[type=submit]').click(),
  ]);
  const secret = (await page.locator('[data-notification-secret]').textContent()) ?? '';
  assert.match(secret, /^[0-9a-f]{48}$/);
  await screenshot(page, 'settings-notification-secret');

  const [made] = await listed();
  assert.ok(made);
  assert.equal(made.kind, 'webhook');
  assert.equal(made.url_host, 'https://hooks.example.com');
  const row = page.locator(`[data-notification="${made.id}"]`);
  assert.equal(await row.locator('[data-notification-kind]').textContent(), 'webhook');
  assert.equal(
    await row.locator('[data-notification-to]').textContent(),
    'https://hooks.example.com',
  );
  assert.equal(await row.locator('[data-notification-on]').textContent(), 'failed, fixed');
  assert.equal(await row.locator('[data-notification-branches]').textContent(), 'main, release/*');
  // The URL's path is never shown.
  assert.doesNotMatch(await page.content(), /very-secret-path/);

  // Shown once: the page again has the notification, not its secret.
  await page.goto(`${stack.url}/projects/tea/settings`);
  assert.equal(await page.locator(`[data-notification="${made.id}"]`).count(), 1);
  assert.equal(await page.locator('[data-notification-secret]').count(), 0);
  assert.doesNotMatch(await page.content(), new RegExp(secret));

  await Promise.all([
    page.waitForURL((u) => u.searchParams.get('saved') === 'notification-deleted'),
    page.click(`[data-delete-notification="${made.id}"]`),
  ]);
  assert.match(
    (await page.locator('[data-notice]').textContent()) ?? '',
    /notification is deleted/,
  );
  assert.equal(await page.locator('[data-notification]').count(), 0);
  assert.deepEqual(await listed(), []);

  const audit = await stack.call('GET', '/v1/projects/tea/audit?limit=100', {
    token: stack.adminToken,
  });
  const lines = audit.body.events
    .filter((e: { action: string }) => e.action === 'notification')
    .map((e: { actor: string; detail: string }) => `${e.actor} ${e.detail}`);
  assert.ok(
    lines.some((l: string) => /^@ada webhook .* added$/.test(l)),
    JSON.stringify(lines),
  );
  assert.ok(
    lines.some((l: string) => /^@ada webhook .* deleted$/.test(l)),
    JSON.stringify(lines),
  );
});

test('a writer sees the notifications without forms and is refused a post; a post without the CSRF token is refused', async () => {
  const made = await stack.call('POST', '/v1/projects/tea/notifications', {
    token: stack.adminToken,
    body: { kind: 'email', to: ['ops@example.com'], on: ['failed'] },
  });
  assert.equal(made.status, 201, made.text);
  const id = made.body.notification.id as string;

  const writer = await signInWithGitea('wes', '/projects/tea/settings');
  const row = writer.locator(`[data-notification="${id}"]`);
  assert.equal(await row.locator('[data-notification-to]').textContent(), 'ops@example.com');
  assert.equal(await writer.locator('form[data-form=notification]').count(), 0);
  assert.equal(await writer.locator('[data-delete-notification]').count(), 0);
  const csrf = await writer.locator('input[name=csrf]').first().inputValue();
  const asWriter = await poster(writer)(
    '/projects/tea/settings/notifications',
    new URLSearchParams({
      csrf,
      kind: 'webhook',
      url: 'https://hooks.example.com/w',
      on: 'failed',
    }).toString(),
  );
  assert.equal(asWriter.status, 403);
  const deleteAsWriter = await poster(writer)(
    `/projects/tea/settings/notifications/${id}/delete`,
    new URLSearchParams({ csrf }).toString(),
  );
  assert.equal(deleteAsWriter.status, 403);

  const admin = await signInWithGitea('ada', '/projects/tea/settings');
  const forged = await poster(admin)(
    '/projects/tea/settings/notifications',
    'kind=webhook&url=https%3A%2F%2Fhooks.example.com%2Fforged&on=failed',
  );
  assert.equal(forged.status, 403);
  const forgedDelete = await poster(admin)(`/projects/tea/settings/notifications/${id}/delete`, '');
  assert.equal(forgedDelete.status, 403);
  assert.deepEqual(
    (await listed()).map((n) => n.id),
    [id],
  );
});
