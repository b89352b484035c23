// Sign-in with a forge over plain HTTP (the browser test walks the same flow
// in Chromium): PKCE and state, a callback that is tampered with, replayed,
// missing its code or carrying the provider's error makes no session; an
// unknown forge is a 404; a forge that does not answer says so; sign-out and
// its immediacy; what the forge lets a person do (read, write), asked with
// the project's token and kept for at most five minutes on a clock the test
// drives; the audit of every action, on the job page and at the API.
import assert from 'node:assert/strict';
import { createHash } from 'node:crypto';
import { after, test } from 'node:test';
import { setPeopleClock } from '../../lib/people/clock.ts';
import { createWorker, startE2E } from '../e2e/calls.ts';
import { startFakeOAuth } from '../helpers/fake-oauth.ts';
import { runningJob, runTask } from '../pages/support.ts';

const oauth = await startFakeOAuth();
const e2e = await startE2E(import.meta.filename, {
  env: {
    CONDUCTOR_GITHUB_CLIENT_ID: oauth.clientId,
    CONDUCTOR_GITHUB_CLIENT_SECRET: oauth.clientSecret,
    CONDUCTOR_GITHUB_OAUTH_URL: oauth.url,
    // GitHub's API (`/user`, the permission question) is the fake provider,
    // which hands the file and status API on to the fake forge.
    CONDUCTOR_GITHUB_API_URL: oauth.url,
    CONDUCTOR_SIGNIN_TIMEOUT_MS: '400',
  },
  projects: {
    project: {
      forge: 'github',
      id: 'people',
      repo: 'acme/app',
      forge_token: 'project-forge-token',
      cancel_superseded: false,
    },
  },
});
oauth.fallback = e2e.fake.url;
const { stack } = e2e;
const REPO = 'acme/app';

let now = Date.now();
setPeopleClock(() => now);
after(() => setPeopleClock(null));

const cookieOf = (res: Response, name: string) =>
  res.headers
    .getSetCookie()
    .find((c) => c.startsWith(`${name}=`))
    ?.split(';')[0];

/** The first half of a sign-in: /login/github, then the provider's answer (where it sends the browser back). */
async function startSignIn(next = '/') {
  const start = await fetch(`${stack.url}/login/github?next=${encodeURIComponent(next)}`, {
    redirect: 'manual',
  });
  assert.equal(start.status, 302, await start.text());
  const state = cookieOf(start, 'conductor_oauth');
  assert.ok(state, 'the state is bound to the browser by a cookie');
  const atProvider = await fetch(start.headers.get('location')!, { redirect: 'manual' });
  assert.equal(atProvider.status, 302);
  return { start, stateCookie: state, callback: new URL(atProvider.headers.get('location')!) };
}

/** A whole sign-in as `login`; answers the session's Cookie header value. */
async function signInAs(login: string): Promise<string> {
  oauth.signInAs = login;
  const { stateCookie, callback } = await startSignIn();
  const done = await fetch(callback, { headers: { cookie: stateCookie }, redirect: 'manual' });
  assert.equal(done.status, 200, await done.clone().text());
  const session = cookieOf(done, 'conductor_session');
  assert.ok(session);
  return session;
}

const page = (path: string, cookie?: string) =>
  fetch(`${stack.url}${path}`, { headers: cookie ? { cookie } : {}, redirect: 'manual' });

async function csrfOf(path: string, cookie: string): Promise<string> {
  const text = await (await page(path, cookie)).text();
  const match = /name="csrf" value="([^"]+)"/.exec(text);
  assert.ok(match, 'the page carries a CSRF token');
  return match[1]!;
}

async function post(path: string, cookie: string, fields: Record<string, string>) {
  return fetch(`${stack.url}${path}`, {
    method: 'POST',
    headers: { cookie },
    body: new URLSearchParams(fields),
    redirect: 'manual',
  });
}

/** A finished job of the project (one task, succeeded). */
async function finishedJob(label: string): Promise<string> {
  const job = await runningJob(e2e, label, '  a:\n    script: [make]\n');
  await runTask(stack, job.token);
  return job.jobId;
}

test('/login offers GitHub beside the admin token, and not Gitea, whose client id is not set', async () => {
  const text = await (await page('/login?next=/jobs')).text();
  assert.match(text, /href="\/login\/github\?next=%2Fjobs"/);
  assert.match(text, /Sign in with GitHub/);
  assert.doesNotMatch(text, /Sign in with Gitea/);
  assert.match(text, /id="token"/, 'the admin token form stays');
});

test('the sign-in asks for no scope, with PKCE (S256) and a state, and comes back to the public callback', async () => {
  const { start, callback } = await startSignIn();
  const asked = oauth.authorizations.at(-1)!;
  assert.equal(asked.clientId, oauth.clientId);
  assert.equal(asked.scope, null, 'GitHub: no scope at all, only the public profile');
  assert.equal(asked.codeChallengeMethod, 'S256');
  assert.match(asked.codeChallenge ?? '', /^[A-Za-z0-9_-]{43}$/);
  assert.match(asked.state ?? '', /^[A-Za-z0-9_-]{20,}$/);
  assert.equal(asked.redirectUri, `${stack.url}/login/github/callback`);
  assert.equal(callback.searchParams.get('state'), asked.state);
  const cookie = start.headers.getSetCookie().find((c) => c.startsWith('conductor_oauth='))!;
  assert.match(cookie, /; Path=\/login\/github\/callback; HttpOnly; SameSite=Lax/);
});

test('a person signed in with GitHub sees a private job page when GitHub says they may read the repository', async () => {
  const jobId = await finishedJob('reader-view');
  oauth.setPermission(REPO, 'rita', 'read');
  const cookie = await signInAs('rita');
  const res = await page(`/jobs/${jobId}`, cookie);
  assert.equal(res.status, 200);
  assert.match(await res.text(), /data-job-state="success"/);
  // The question went to GitHub with the project's own token, never the person's.
  const asked = oauth.permissionRequests.filter((r) => r.login === 'rita');
  assert.ok(asked.length >= 1);
  assert.equal(asked[0]!.authorization, 'Bearer project-forge-token');
  assert.equal(asked[0]!.repo, REPO);
});

test('someone GitHub gives no access to the repository finds the private page as if it did not exist', async () => {
  const jobId = await finishedJob('stranger');
  const cookie = await signInAs('stranger');
  const res = await page(`/jobs/${jobId}`, cookie);
  assert.equal(res.status, 404);
  const text = await res.text();
  assert.match(text, new RegExp(`job ${jobId} does not exist`));
  assert.doesNotMatch(text, /acme\/app/, 'the private repository is not named');
  const home = await (await page('/', cookie)).text();
  assert.doesNotMatch(home, /href="\/projects\/people"/, 'the front page leaves the project out');
});

test("a reader's Rerun answers 403 saying it needs write access; nothing is rerun or audited", async () => {
  const jobId = await finishedJob('reader-rerun');
  oauth.setPermission(REPO, 'rita', 'read');
  const cookie = await signInAs('rita');
  const csrf = await csrfOf(`/jobs/${jobId}`, cookie);
  const res = await post(`/jobs/${jobId}/rerun`, cookie, { csrf });
  assert.equal(res.status, 403);
  assert.match(
    await res.text(),
    /GitHub says @rita has read access to acme\/app; rerunning a job needs write access/,
  );
  const audit = await stack.call('GET', '/v1/projects/people/audit', { token: stack.adminToken });
  assert.equal(audit.body.events.filter((e: { job_id?: string }) => e.job_id === jobId).length, 0);
});

test("a writer's Rerun works, and is audited: on the job page and at the audit route, with the session", async () => {
  const jobId = await finishedJob('writer-rerun');
  oauth.setPermission(REPO, 'wanda', 'write');
  const cookie = await signInAs('wanda');
  const csrf = await csrfOf(`/jobs/${jobId}`, cookie);
  const res = await post(`/jobs/${jobId}/rerun`, cookie, { csrf });
  assert.equal(res.status, 303);
  assert.match(res.headers.get('location') ?? '', /^\/jobs\/[0-9a-f-]{36}$/);
  assert.notEqual(res.headers.get('location'), `/jobs/${jobId}`, 'a new job');
  const audit = await stack.call('GET', '/v1/projects/people/audit?limit=5', {
    token: stack.adminToken,
  });
  assert.equal(audit.status, 200);
  const event = audit.body.events[0];
  assert.equal(event.actor, '@wanda');
  assert.equal(event.action, 'rerun');
  assert.equal(event.job_id, jobId);
  assert.match(event.detail, /^as job #\d+$/);
  assert.match(event.session_id, /^[0-9a-f-]{36}$/);
  assert.ok(Math.abs(Date.parse(event.at) - Date.now()) < 60_000);
  const text = await (await page(`/jobs/${jobId}`, cookie)).text();
  assert.match(text, /rerun by <strong>@wanda<\/strong> <time[^>]*>/);
});

test('the admin token\'s actions are audited as "admin token"; the audit route pages with before and is newest first', async () => {
  const jobId = await finishedJob('admin-audit');
  const rerun = await stack.call('POST', `/v1/jobs/${jobId}/rerun`, {
    token: stack.adminToken,
    body: {},
  });
  assert.equal(rerun.status, 202);
  const secret = await stack.call('PUT', '/v1/projects/people/secrets/DEPLOY_KEY', {
    token: stack.adminToken,
    body: { value: 'a-long-enough-value' },
  });
  assert.equal(secret.status, 204);
  const settings = await stack.call('PATCH', '/v1/projects/people', {
    token: stack.adminToken,
    body: { name: 'People' },
  });
  assert.equal(settings.status, 200);
  const all = await stack.call('GET', '/v1/projects/people/audit?limit=3', {
    token: stack.adminToken,
  });
  assert.deepEqual(
    all.body.events.map((e: Record<string, string>) => [e.actor, e.action, e.detail]),
    [
      ['admin token', 'settings', 'name'],
      ['admin token', 'secret', 'DEPLOY_KEY set'],
      ['admin token', 'rerun', `as job #${rerun.body.number}`],
    ],
  );
  assert.equal(all.body.events[0].session_id, null, 'the API bearer has no session');
  const older = await stack.call(
    'GET',
    `/v1/projects/people/audit?limit=1&before=${all.body.events[1].id}`,
    { token: stack.adminToken },
  );
  assert.equal(older.body.events[0].id, all.body.events[2].id);
  const bad = await stack.call('GET', '/v1/projects/people/audit?limit=0', {
    token: stack.adminToken,
  });
  assert.equal(bad.status, 400);
  assert.match(bad.body.error.message, /limit/);
  const none = await stack.call('GET', '/v1/projects/nope/audit', { token: stack.adminToken });
  assert.equal(none.status, 404);
  const anonymous = await stack.call('GET', '/v1/projects/people/audit');
  assert.equal(anonymous.status, 401);
});

test('a person whose write access is removed keeps it no longer than five minutes (the clock driven here)', async () => {
  const first = await finishedJob('revoked-1');
  const second = await finishedJob('revoked-2');
  oauth.setPermission(REPO, 'rob', 'write');
  const cookie = await signInAs('rob');
  let csrf = await csrfOf(`/jobs/${first}`, cookie);
  assert.equal((await post(`/jobs/${first}/rerun`, cookie, { csrf })).status, 303, 'allowed');
  oauth.setPermission(REPO, 'rob', null);
  const asked = oauth.permissionRequests.filter((r) => r.login === 'rob').length;
  // Four minutes and a half later: still the cached answer, the forge not asked again.
  now += 4.5 * 60_000;
  csrf = await csrfOf(`/jobs/${second}`, cookie);
  const within = await post(`/jobs/${second}/rerun`, cookie, { csrf });
  assert.equal(within.status, 303);
  assert.equal(oauth.permissionRequests.filter((r) => r.login === 'rob').length, asked);
  // Past five minutes: asked again, and refused.
  now += 31_000;
  const res = await post(`/jobs/${second}/rerun`, cookie, { csrf });
  // No access at all: the job is, to rob, one that does not exist.
  assert.equal(res.status, 404);
  assert.match(await res.text(), new RegExp(`job ${second} does not exist`));
  assert.equal(oauth.permissionRequests.filter((r) => r.login === 'rob').length, asked + 1);
});

test("a writer's Cancel of a running job is audited as them; a new forge token makes Conductor ask the forge again", async () => {
  const job = await runningJob(e2e, 'writer-cancel', '  a:\n    script: [make]\n');
  oauth.setPermission(REPO, 'carl', 'write');
  const cookie = await signInAs('carl');
  const csrf = await csrfOf(`/jobs/${job.jobId}`, cookie);
  const res = await post(`/jobs/${job.jobId}/cancel`, cookie, { csrf });
  assert.equal(res.status, 303);
  const audit = await stack.call('GET', '/v1/projects/people/audit?limit=1', {
    token: stack.adminToken,
  });
  assert.deepEqual(
    [audit.body.events[0].actor, audit.body.events[0].action, audit.body.events[0].job_id],
    ['@carl', 'cancel', job.jobId],
  );
  const asked = oauth.permissionRequests.filter((r) => r.login === 'carl').length;
  const patched = await stack.call('PATCH', '/v1/projects/people', {
    token: stack.adminToken,
    body: { forge_token: 'project-forge-token-2' },
  });
  assert.equal(patched.status, 200);
  assert.equal((await page(`/jobs/${job.jobId}`, cookie)).status, 200);
  const again = oauth.permissionRequests.filter((r) => r.login === 'carl');
  assert.equal(again.length, asked + 1, 'the cached answer was forgotten');
  assert.equal(again.at(-1)!.authorization, 'Bearer project-forge-token-2');
});

test('a project without a forge token answers "ask an admin" instead of guessing', async () => {
  // Public: anyone may view it, and running it needs a question Conductor cannot ask.
  await e2e.addProject({
    forge: 'github',
    id: 'tokenless',
    repo: 'acme/tokenless',
    visibility: 'public',
  } as never);
  oauth.setPermission('acme/tokenless', 'rita', 'admin');
  const cookie = await signInAs('rita');
  assert.equal((await page('/projects/tokenless', cookie)).status, 200);
  const csrf = await csrfOf('/projects/tokenless', cookie);
  const res = await post('/projects/tokenless/run', cookie, { csrf, ref: 'main' });
  assert.equal(res.status, 403);
  assert.match(
    await res.text(),
    /tokenless has no forge token, so Conductor cannot ask GitHub what @rita may do: ask an admin/,
  );
  // Private: nothing to tell a person Conductor cannot ask about; the same 404 as no project.
  await e2e.addProject({ forge: 'github', id: 'tokenless-private', repo: 'acme/hidden' });
  const hidden = await page('/projects/tokenless-private', cookie);
  assert.equal(hidden.status, 404);
  const text = await hidden.text();
  assert.match(text, /project tokenless-private does not exist/);
  assert.doesNotMatch(text, /acme\/hidden/);
});

test('a callback whose state was changed on the way makes no session', async () => {
  oauth.signInAs = 'mallory';
  const { stateCookie, callback } = await startSignIn();
  callback.searchParams.set('state', `${callback.searchParams.get('state')}x`);
  const res = await fetch(callback, { headers: { cookie: stateCookie }, redirect: 'manual' });
  assert.equal(res.status, 400);
  assert.match(await res.text(), /its state was changed on the way: nobody was signed in/);
  assert.equal(cookieOf(res, 'conductor_session'), undefined);
});

test('a callback from another browser (no state cookie) makes no session', async () => {
  const { callback } = await startSignIn();
  const res = await fetch(callback, { redirect: 'manual' });
  assert.equal(res.status, 400);
  assert.equal(cookieOf(res, 'conductor_session'), undefined);
});

test('a callback used twice signs in once', async () => {
  oauth.signInAs = 'rita';
  const { stateCookie, callback } = await startSignIn();
  const first = await fetch(callback, { headers: { cookie: stateCookie }, redirect: 'manual' });
  assert.equal(first.status, 200);
  const again = await fetch(callback, { headers: { cookie: stateCookie }, redirect: 'manual' });
  assert.equal(again.status, 400);
  assert.match(await again.text(), /already used, or took longer than ten minutes/);
  assert.equal(cookieOf(again, 'conductor_session'), undefined);
});

test('a state older than ten minutes is refused', async () => {
  const { stateCookie, callback } = await startSignIn();
  now += 11 * 60_000;
  const res = await fetch(callback, { headers: { cookie: stateCookie }, redirect: 'manual' });
  assert.equal(res.status, 400);
  assert.equal(cookieOf(res, 'conductor_session'), undefined);
});

test("a callback without a code, or with the provider's error, shows a clear page and makes no session", async () => {
  const { stateCookie, callback } = await startSignIn();
  callback.searchParams.delete('code');
  const noCode = await fetch(callback, { headers: { cookie: stateCookie }, redirect: 'manual' });
  assert.equal(noCode.status, 400);
  assert.match(await noCode.text(), /GitHub sent no code back: nobody was signed in/);
  assert.equal(cookieOf(noCode, 'conductor_session'), undefined);

  oauth.authorizeError = 'access_denied';
  try {
    const denied = await startSignIn();
    const res = await fetch(denied.callback, {
      headers: { cookie: denied.stateCookie },
      redirect: 'manual',
    });
    assert.equal(res.status, 400);
    assert.match(await res.text(), /GitHub did not sign you in \(access_denied/);
    assert.equal(cookieOf(res, 'conductor_session'), undefined);
  } finally {
    oauth.authorizeError = null;
  }
});

test('a code that the provider refuses (a wrong PKCE verifier) makes no session', async () => {
  const { stateCookie, callback } = await startSignIn();
  // The code is good once at the provider: spending it first makes the exchange fail.
  const tokenRes = await fetch(`${oauth.url}/login/oauth/access_token`, {
    method: 'POST',
    body: new URLSearchParams({
      client_id: oauth.clientId,
      client_secret: oauth.clientSecret,
      code: callback.searchParams.get('code')!,
      redirect_uri: `${stack.url}/login/github/callback`,
      code_verifier: 'not-the-verifier',
    }),
  });
  assert.equal(tokenRes.status, 400);
  assert.match(JSON.stringify(await tokenRes.json()), /PKCE verification failed/);
  const res = await fetch(callback, { headers: { cookie: stateCookie }, redirect: 'manual' });
  assert.equal(res.status, 400);
  assert.match(await res.text(), /GitHub refused the sign-in \(bad_verification_code/);
  assert.equal(cookieOf(res, 'conductor_session'), undefined);
  // What the server sent was its own verifier, which the challenge it gave was made from.
  const sent = oauth.tokenRequests.at(-1)!;
  const asked = oauth.authorizations.find((a) => a.state === callback.searchParams.get('state'))!;
  assert.equal(
    createHash('sha256').update(sent.code_verifier!).digest('base64url'),
    asked.codeChallenge,
  );
});

test("GitHub's way of refusing a code (an error in a 200 answer) makes no session and names the error", async () => {
  const { stateCookie, callback } = await startSignIn();
  callback.searchParams.set('code', 'a-code-github-never-gave');
  oauth.errorsWith200 = true;
  try {
    const res = await fetch(callback, { headers: { cookie: stateCookie }, redirect: 'manual' });
    assert.equal(res.status, 400);
    assert.match(
      await res.text(),
      /GitHub refused the sign-in \(bad_verification_code: The code passed is incorrect or expired.\)/,
    );
    assert.equal(cookieOf(res, 'conductor_session'), undefined);
  } finally {
    oauth.errorsWith200 = false;
  }
});

test('an unknown forge, or one not configured, answers 404', async () => {
  for (const path of ['/login/bitbucket', '/login/gitea', '/login/bitbucket/callback?state=x']) {
    const res = await page(path);
    assert.equal(res.status, 404, path);
    assert.match(await res.text(), /there is no sign-in with/);
  }
});

test('a provider that does not answer in time shows "GitHub did not answer; try again", not a 500', async () => {
  const { stateCookie, callback } = await startSignIn();
  oauth.hang = true;
  try {
    const res = await fetch(callback, { headers: { cookie: stateCookie }, redirect: 'manual' });
    assert.equal(res.status, 503);
    assert.equal(res.headers.get('retry-after'), '5');
    assert.match(await res.text(), /GitHub did not answer; try again/);
    assert.equal(cookieOf(res, 'conductor_session'), undefined);
  } finally {
    oauth.hang = false;
  }
});

test('a permission question GitHub does not answer in time shows "GitHub did not answer; try again"', async () => {
  const jobId = await finishedJob('hang-permission');
  const cookie = await signInAs('hank');
  oauth.hangPermissions = true;
  try {
    const res = await page(`/jobs/${jobId}`, cookie);
    assert.equal(res.status, 503);
    assert.match(await res.text(), /GitHub did not answer; try again/);
  } finally {
    oauth.hangPermissions = false;
  }
});

test('signing out ends the session at once: the same cookie, sent again, opens nothing', async () => {
  const jobId = await finishedJob('sign-out');
  oauth.setPermission(REPO, 'sam', 'read');
  const cookie = await signInAs('sam');
  assert.equal((await page(`/jobs/${jobId}`, cookie)).status, 200);
  const csrf = await csrfOf(`/jobs/${jobId}`, cookie);
  const out = await post('/logout', cookie, { csrf });
  assert.equal(out.status, 303);
  assert.match(out.headers.getSetCookie()[0] ?? '', /conductor_session=; .*Max-Age=0/);
  const again = await page(`/jobs/${jobId}`, cookie);
  assert.equal(again.status, 302);
  assert.match(again.headers.get('location') ?? '', /^\/login\?next=/);
});

test("an admin revokes a person's session: it ends at once, wherever its cookie is", async () => {
  const jobId = await finishedJob('revoke');
  oauth.setPermission(REPO, 'victor', 'read');
  const cookie = await signInAs('victor');
  assert.equal((await page(`/jobs/${jobId}`, cookie)).status, 200);
  const list = await stack.call('GET', '/v1/sessions', { token: stack.adminToken });
  assert.equal(list.status, 200);
  const mine = list.body.sessions.find(
    (s: Record<string, string>) => s.login === 'victor' && s.forge === 'github',
  );
  assert.ok(mine, JSON.stringify(list.body.sessions));
  assert.equal(mine.kind, 'forge');
  assert.equal(JSON.stringify(mine).includes(cookie.split('=')[1]!), false, 'never the cookie');
  const revoked = await stack.call('DELETE', `/v1/sessions/${mine.id}`, {
    token: stack.adminToken,
  });
  assert.equal(revoked.status, 204);
  assert.equal((await page(`/jobs/${jobId}`, cookie)).status, 302);
  const again = await stack.call('DELETE', `/v1/sessions/${mine.id}`, {
    token: stack.adminToken,
  });
  assert.equal(again.status, 404);
  const anonymous = await stack.call('GET', '/v1/sessions');
  assert.equal(anonymous.status, 401);
});

test('an admin-token session is kept server-side too: signing out ends it at once', async () => {
  const jobId = await finishedJob('admin-sign-out');
  const login = await fetch(`${stack.url}/login`, {
    method: 'POST',
    body: new URLSearchParams({ token: stack.adminToken, next: '/' }),
    redirect: 'manual',
  });
  const cookie = cookieOf(login, 'conductor_session')!;
  assert.equal((await page(`/jobs/${jobId}`, cookie)).status, 200);
  const csrf = await csrfOf(`/jobs/${jobId}`, cookie);
  assert.equal((await post('/logout', cookie, { csrf })).status, 303);
  assert.equal((await page(`/jobs/${jobId}`, cookie)).status, 302);
});

// Issue #46: the project page listed the build hosts to any signed-in account.
test('the project page shows the workers to a writer and the admin, not to a reader', async () => {
  await createWorker(stack, ['linux'], 'build-host-7');
  oauth.setPermission(REPO, 'rhea', 'read');
  oauth.setPermission(REPO, 'wes', 'write');
  const projectPage = async (cookie: string) => (await page('/projects/people', cookie)).text();
  const reader = await projectPage(await signInAs('rhea'));
  assert.match(reader, /data-job-state|<h1>/);
  assert.doesNotMatch(reader, /build-host-7/);
  assert.doesNotMatch(reader, /<h2>Workers<\/h2>/);
  assert.match(await projectPage(await signInAs('wes')), /data-worker="build-host-7"/);
});
