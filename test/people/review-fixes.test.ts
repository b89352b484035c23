// The review of the forge sign-in (#31), as a person sees it: the link of a
// commit status opens its job's page also once its holder signs in with a
// forge that refuses them (or does not answer); a private project or job one
// may not view answers exactly as one that does not exist, naming no
// repository; the front page asks the forge about every project at once
// under one deadline, and says when the forge did not answer.
import assert from 'node:assert/strict';
import { after, test } from 'node:test';
import { setPeopleClock } from '../../lib/people/clock.ts';
import { startE2E } from '../e2e/calls.ts';
import { startFakeOAuth } from '../helpers/fake-oauth.ts';
import { runningJob, runTask } from '../pages/support.ts';

const TIMEOUT_MS = 400;
const oauth = await startFakeOAuth();
const e2e = await startE2E(import.meta.filename, {
  env: {
    CONDUCTOR_GITHUB_CLIENT_ID: oauth.clientId,
    CONDUCTOR_GITHUB_CLIENT_SECRET: oauth.clientSecret,
    CONDUCTOR_GITHUB_OAUTH_URL: oauth.url,
    CONDUCTOR_GITHUB_API_URL: oauth.url,
    CONDUCTOR_SIGNIN_TIMEOUT_MS: String(TIMEOUT_MS),
  },
  projects: {
    project: {
      forge: 'github',
      id: 'secret',
      repo: 'acme/secret-app',
      forge_token: 'project-forge-token',
      cancel_superseded: false,
    },
  },
});
oauth.fallback = e2e.fake.url;
const { stack } = e2e;
let now = Date.now();
setPeopleClock(() => now);
after(() => setPeopleClock(null));

const cookieOf = (res: Response, name: string) =>
  res.headers
    .getSetCookie()
    .find((c) => c.startsWith(`${name}=`))
    ?.split(';')[0];

async function signInAs(login: string): Promise<string> {
  oauth.signInAs = login;
  const start = await fetch(`${stack.url}/login/github?next=%2F`, { redirect: 'manual' });
  const stateCookie = cookieOf(start, 'conductor_oauth')!;
  const atProvider = await fetch(start.headers.get('location')!, { redirect: 'manual' });
  const callback = new URL(atProvider.headers.get('location')!);
  const done = await fetch(callback, { headers: { cookie: stateCookie }, redirect: 'manual' });
  assert.equal(done.status, 200, await done.clone().text());
  return cookieOf(done, 'conductor_session')!;
}

const page = (path: string, cookie?: string) =>
  fetch(`${stack.url}${path}`, { headers: cookie ? { cookie } : {}, redirect: 'manual' });

async function finishedJob(label: string): Promise<string> {
  const job = await runningJob(e2e, label, '  a:\n    script: [make]\n');
  await runTask(stack, job.token);
  return job.jobId;
}

/** The job page's signed link, as a commit status carries it. */
async function signedLink(jobId: string): Promise<{ path: string; sig: string }> {
  const view = await stack.call('GET', `/v1/jobs/${jobId}`, { token: stack.adminToken });
  const url = new URL(view.body.job.page_url);
  return { path: url.pathname, sig: url.searchParams.get('sig')! };
}

test("a commit status's signed link opens its job's page for a person the forge refuses, or while it does not answer", async () => {
  const jobId = await finishedJob('signed-link');
  const { path, sig } = await signedLink(jobId);
  const q = `sig=${encodeURIComponent(sig)}`;
  assert.equal((await page(`${path}?${q}`)).status, 200, 'signed out');
  const cookie = await signInAs('outsider'); // GitHub gives outsider no access
  const signedIn = await page(`${path}?${q}`, cookie);
  assert.equal(signedIn.status, 200);
  assert.match(await signedIn.text(), /acme\/secret-app/, 'the job page itself');
  const live = await page(`${path}/live?${q}`, cookie);
  assert.equal(live.status, 200, 'its live updates too');
  // Without the link, the same person finds no such job.
  const bare = await page(path, cookie);
  assert.equal(bare.status, 404);
  // A forge that does not answer does not close the link either.
  oauth.hangPermissions = true;
  now += 6 * 60_000; // past the five minutes an answer is kept
  try {
    const hanging = await page(`${path}?${q}`, await signInAs('waiting'));
    assert.equal(hanging.status, 200);
  } finally {
    oauth.hangPermissions = false;
  }
});

test('a private project or job one may not view answers exactly as a missing one, naming no repository', async () => {
  const jobId = await finishedJob('hidden');
  const cookie = await signInAs('randomperson');
  const existing = await page('/projects/secret', cookie);
  const missing = await page('/projects/no-such', cookie);
  assert.equal(existing.status, 404);
  assert.equal(missing.status, 404);
  const [a, b] = [await existing.text(), await missing.text()];
  assert.doesNotMatch(a, /acme\/secret-app/);
  assert.equal(a.replaceAll('secret', 'X'), b.replaceAll('no-such', 'X'), 'the same page');

  const otherJob = '00000000-0000-4000-8000-000000000000';
  const job = await page(`/jobs/${jobId}`, cookie);
  const noJob = await page(`/jobs/${otherJob}`, cookie);
  assert.equal(job.status, 404);
  assert.equal(noJob.status, 404);
  assert.equal(
    (await job.text()).replaceAll(jobId, 'X'),
    (await noJob.text()).replaceAll(otherJob, 'X'),
  );

  // A reader is still told why an action is refused.
  oauth.setPermission('acme/secret-app', 'reader', 'read');
  const reader = await signInAs('reader');
  const text = await (await page(`/jobs/${jobId}`, reader)).text();
  const csrf = /name="csrf" value="([^"]+)"/.exec(text)![1]!;
  const rerun = await fetch(`${stack.url}/jobs/${jobId}/rerun`, {
    method: 'POST',
    headers: { cookie: reader },
    body: new URLSearchParams({ csrf }),
    redirect: 'manual',
  });
  assert.equal(rerun.status, 403);
  assert.match(await rerun.text(), /GitHub says @reader has read access to acme\/secret-app/);
});

test('the front page asks the forge about every project at once, within one timeout, and says when it did not answer', async () => {
  for (let i = 0; i < 8; i++) {
    await e2e.addProject({
      forge: 'github',
      id: `extra${i}`,
      repo: `acme/extra${i}`,
      forge_token: 'project-forge-token',
    } as never);
  }
  oauth.setPermission('acme/extra3', 'slowpoke', 'read');
  const cookie = await signInAs('slowpoke');
  now += 6 * 60_000;
  oauth.hangPermissions = true;
  let text: string;
  const t0 = Date.now();
  try {
    const home = await page('/', cookie);
    assert.equal(home.status, 200);
    text = await home.text();
  } finally {
    oauth.hangPermissions = false;
  }
  const ms = Date.now() - t0;
  assert.ok(ms < 2 * TIMEOUT_MS, `9 projects took ${ms} ms with a ${TIMEOUT_MS} ms timeout`);
  assert.match(text, /GitHub did not answer; some projects may be missing/);
  assert.doesNotMatch(text, /href="\/projects\/extra3"/);
  // Answering again: the project it may read, and no notice.
  const again = await (await page('/', cookie)).text();
  assert.match(again, /href="\/projects\/extra3"/);
  assert.doesNotMatch(again, /did not answer/);
});
