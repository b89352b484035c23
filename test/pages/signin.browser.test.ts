// Sign-in with GitHub in a real browser (Chromium), against the fake OAuth
// provider and permission API on loopback: a private job page sends you to
// /login, "Sign in with GitHub" brings you back to it signed in; a reader's
// Rerun is a 403 that says why; a writer's works and the job page says who
// did it; a person whose access is removed loses it once the five minutes
// pass (the clock driven here); a tampered state signs nobody in; signing
// out ends it.
import assert from 'node:assert/strict';
import { after, test } from 'node:test';
import type { Page } from 'playwright-core';
import { setPeopleClock } from '../../lib/people/clock.ts';
import { startE2E } from '../e2e/calls.ts';
import { startFakeOAuth } from '../helpers/fake-oauth.ts';
import { launchBrowser, newPage, runningJob, runTask, screenshot } from './support.ts';

const oauth = await startFakeOAuth();
const e2e = await startE2E(import.meta.filename, {
  env: {
    CONDUCTOR_GITHUB_CLIENT_ID: oauth.clientId,
    CONDUCTOR_GITHUB_CLIENT_SECRET: oauth.clientSecret,
    CONDUCTOR_GITHUB_OAUTH_URL: oauth.url,
    CONDUCTOR_GITHUB_API_URL: oauth.url,
  },
  projects: {
    project: {
      forge: 'github',
      id: 'browser-people',
      repo: 'acme/web',
      forge_token: 'project-forge-token',
      cancel_superseded: false,
    },
  },
});
oauth.fallback = e2e.fake.url;
const { stack } = e2e;
const REPO = 'acme/web';
const browser = await launchBrowser();

let now = Date.now();
setPeopleClock(() => now);
after(() => setPeopleClock(null));

async function finishedJob(label: string): Promise<string> {
  const job = await runningJob(e2e, label, '  a:\n    script: [make]\n');
  await runTask(stack, job.token);
  return job.jobId;
}

/** Opens a private job page signed out, and signs in with GitHub from /login as `login`. */
async function signInWithGitHub(page: Page, login: string, jobId: string): Promise<void> {
  oauth.signInAs = login;
  await page.goto(`${stack.url}/jobs/${jobId}`);
  assert.equal(new URL(page.url()).pathname, '/login');
  await Promise.all([
    page.waitForURL((u) => u.pathname === `/jobs/${jobId}`),
    page.click('[data-sign-in="github"]'),
  ]);
}

test('a reader signs in with GitHub and sees the private page; their Rerun is refused with the reason', async () => {
  const jobId = await finishedJob('b-reader');
  oauth.setPermission(REPO, 'rita', 'read');
  const { page, context } = await newPage(browser);
  await signInWithGitHub(page, 'rita', jobId);
  assert.equal(await page.locator('[data-job-state]').getAttribute('data-job-state'), 'success');
  const cookies = await context.cookies(stack.url);
  const session = cookies.find((c) => c.name === 'conductor_session');
  assert.ok(session?.httpOnly, 'an HttpOnly session cookie');
  assert.equal(session?.sameSite, 'Strict');

  const [res] = await Promise.all([
    page.waitForResponse((r) => r.url().endsWith(`/jobs/${jobId}/rerun`)),
    page.locator(`form[action="/jobs/${jobId}/rerun"] button`).first().click(),
  ]);
  assert.equal(res.status(), 403);
  await page.waitForLoadState();
  assert.match(
    (await page.locator('main').textContent()) ?? '',
    /GitHub says @rita has read access to acme\/web; rerunning a job needs write access/,
  );
  await screenshot(page, 'signin-reader-refused');
});

test("a writer's Rerun works and the job page says who did it; removed from the repository, they lose it within five minutes", async () => {
  const jobId = await finishedJob('b-writer');
  oauth.setPermission(REPO, 'wanda', 'write');
  const { page } = await newPage(browser);
  await signInWithGitHub(page, 'wanda', jobId);
  await Promise.all([
    page.waitForURL(
      (u) => /^\/jobs\/[0-9a-f-]{36}$/.test(u.pathname) && !u.pathname.endsWith(jobId),
    ),
    page.locator(`form[action="/jobs/${jobId}/rerun"] button`).first().click(),
  ]);
  await page.goto(`${stack.url}/jobs/${jobId}`);
  const line = page.locator('[data-audit] [data-audit-action="rerun"]');
  assert.match((await line.textContent()) ?? '', /^rerun by @wanda (just now|\d+ s ago|now)/);
  await screenshot(page, 'signin-writer-audited');

  // Removed from the repository: the cached answer stands for at most five minutes.
  oauth.setPermission(REPO, 'wanda', null);
  now += 5 * 60_000 + 1_000;
  // No access at all: the job reads as one that does not exist, naming no repository.
  const res = await page.reload();
  assert.equal(res?.status(), 404);
  const main = (await page.locator('main').textContent()) ?? '';
  assert.match(main, new RegExp(`job ${jobId} does not exist`));
  assert.doesNotMatch(main, /acme\/web/);
});

test('a callback with a tampered state shows a page that says so, and signs nobody in', async () => {
  const jobId = await finishedJob('b-tampered');
  oauth.setPermission(REPO, 'mallory', 'admin');
  const { page, context } = await newPage(browser);
  oauth.signInAs = 'mallory';
  // The way to the provider and back, without following the last redirect
  // (the test changes the state the provider sent back): the state's cookie
  // goes into the browser as /login/github would have set it.
  const start = await fetch(`${stack.url}/login/github?next=/jobs/${jobId}`, {
    redirect: 'manual',
  });
  const stateCookie = start.headers.getSetCookie()[0]!.split(';')[0]!;
  const [name, value] = stateCookie.split('=') as [string, string];
  await context.addCookies([
    { name, value, url: `${stack.url}/login/github/callback`, httpOnly: true, sameSite: 'Lax' },
  ]);
  const atProvider = await fetch(start.headers.get('location')!, { redirect: 'manual' });
  const callback = new URL(atProvider.headers.get('location')!);
  assert.ok(callback.searchParams.get('code'), 'the provider sent the browser back with a code');
  const untouched = callback.href;
  callback.searchParams.set('state', 'tampered-state-value-0000000000000000000');
  const res = await page.goto(callback.href);
  assert.equal(res?.status(), 400);
  assert.match(
    (await page.locator('main').textContent()) ?? '',
    /its state was changed on the way: nobody was signed in/,
  );
  const cookies = await context.cookies(stack.url);
  assert.equal(
    cookies.find((c) => c.name === 'conductor_session'),
    undefined,
  );
  await page.goto(`${stack.url}/jobs/${jobId}`);
  assert.equal(new URL(page.url()).pathname, '/login');
  // The same callback, untouched, would have signed in: the state is what failed.
  await context.addCookies([
    { name, value, url: `${stack.url}/login/github/callback`, httpOnly: true, sameSite: 'Lax' },
  ]);
  await Promise.all([
    page.waitForURL((u) => u.pathname === `/jobs/${jobId}`),
    page.goto(untouched),
  ]);
  assert.equal(await page.locator('[data-job-state]').getAttribute('data-job-state'), 'success');
});

test('signing out ends the session: the private page asks to sign in again', async () => {
  const jobId = await finishedJob('b-sign-out');
  oauth.setPermission(REPO, 'sam', 'read');
  const { page } = await newPage(browser);
  await signInWithGitHub(page, 'sam', jobId);
  await Promise.all([
    page.waitForURL((u) => u.pathname === '/'),
    page.click('form[action="/logout"] button'),
  ]);
  await page.goto(`${stack.url}/jobs/${jobId}`);
  assert.equal(new URL(page.url()).pathname, '/login');
});
