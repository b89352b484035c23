// The pages over plain HTTP (no browser): signed links and sessions, CSRF on
// the forms, approve from the page, the log read page by page (the API's
// limit, the page's last MiB with its line numbers, "load earlier", the
// CLI), gzip, and bad query values.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { runCtl } from '../../cli/ctl.ts';
import {
  JOB_LINK_TTL_S,
  newSession,
  readSession,
  secureSite,
  sessionCookie,
  signJobLink,
  verifyJobLink,
} from '../../lib/pages/access.ts';
import { safeNext } from '../../lib/pages/index.ts';
import { generateKey, parseKeyring } from '../../lib/secrets.ts';
import {
  claimTask,
  createWorker,
  getJob,
  sendWebhook,
  startE2E,
  uploadLog,
  waitForJob,
} from '../e2e/calls.ts';
import { sha } from '../e2e/payloads.ts';
import { githubPullRequest } from '../forge/fixtures/github.ts';
import { runningJob } from './support.ts';

const e2e = await startE2E(import.meta.filename, {
  // The fake forge is on loopback.
  env: { CONDUCTOR_ALLOW_PRIVATE_FORGES: '1' },
  projects: {
    project: { forge: 'github', id: 'paged', repo: 'acme/paged', cancel_superseded: false },
  },
});
const { stack } = e2e;

/** Signs in over HTTP; answers the Cookie header value to send. */
async function session(): Promise<string> {
  const res = await fetch(`${stack.url}/login`, {
    method: 'POST',
    body: new URLSearchParams({ token: stack.adminToken, next: '/' }),
    redirect: 'manual',
  });
  assert.equal(res.status, 303);
  const cookie = res.headers.getSetCookie()[0]!;
  assert.match(
    cookie,
    /^conductor_session=[^;]+; Path=\/; HttpOnly; SameSite=Strict; Max-Age=\d+$/,
  );
  return cookie.split(';')[0]!;
}

let signedIn: string | undefined;
/** One session for the reads that need one. */
const sessionCookieOnce = async () => {
  signedIn ??= await session();
  return signedIn;
};

const get = (path: string, headers: Record<string, string> = {}) =>
  fetch(`${stack.url}${path}`, { headers, redirect: 'manual' });

test('a signed link opens its own job only, until it expires; a rotated key still opens links it signed', () => {
  const old = generateKey();
  const keyring = parseKeyring(old);
  const job = '0b5c43c2-3c51-4b8e-9a57-0e0c4f8d2c11';
  const sig = signJobLink(keyring, job);
  assert.equal(verifyJobLink(keyring, job, sig), true);
  assert.equal(verifyJobLink(keyring, job.toUpperCase(), sig), true);
  assert.equal(verifyJobLink(keyring, '1b5c43c2-3c51-4b8e-9a57-0e0c4f8d2c11', sig), false);
  const expires = Number(sig.split('.')[0]);
  const now = Math.floor(Date.now() / 1000);
  assert.ok(expires >= now + JOB_LINK_TTL_S - 5, 'valid for 90 days');
  assert.ok(expires < now + JOB_LINK_TTL_S + 24 * 3600, 'and less than a day more');
  assert.equal(expires % (24 * 3600), 0, 'until the end of a UTC day');
  assert.equal(signJobLink(keyring, job), sig, 'the same link when signed again the same day');
  assert.equal(
    verifyJobLink(keyring, job, `${now + 10 * JOB_LINK_TTL_S}.${sig.split('.')[1]}`),
    false,
  );
  assert.equal(verifyJobLink(keyring, job, signJobLink(keyring, job, now - 1)), false, 'expired');
  assert.equal(verifyJobLink(parseKeyring(`${generateKey()},${old}`), job, sig), true);
  assert.equal(verifyJobLink(parseKeyring(generateKey()), job, sig), false);
  for (const bad of ['', 'x', `${expires}.`, `${expires}.${'A'.repeat(43)}`]) {
    assert.equal(verifyJobLink(keyring, job, bad), false, bad);
  }
});

test("a session is the admin token's: a new admin token ends it; the cookie is Secure except on loopback", () => {
  const keyring = parseKeyring(generateKey());
  const s = newSession(keyring, 'admin-token-one-1234');
  assert.deepEqual(readSession(keyring, 'admin-token-one-1234', s.value)?.id, s.id);
  assert.equal(readSession(keyring, 'admin-token-two-1234', s.value), null);
  assert.equal(readSession(keyring, 'admin-token-one-1234', `${s.value.slice(0, -1)}x`), null);
  const cookie = (host: string, publicUrl?: string, proto?: string) =>
    sessionCookie(s.value, secureSite(publicUrl, host, proto));
  assert.match(cookie('ci.example.test'), /; Secure;/);
  assert.doesNotMatch(cookie('127.0.0.1:8080'), /Secure/);
  assert.doesNotMatch(cookie('localhost:8080'), /Secure/);
  assert.match(sessionCookie(null, true), /Max-Age=0/);
  // Behind a proxy the request comes to loopback over plain http: the public
  // URL decides (issue #49), and so does the scheme a trusted proxy forwards.
  assert.match(cookie('127.0.0.2:8080', 'https://ci.example.test'), /; Secure;/);
  assert.doesNotMatch(cookie('ci.example.test', 'http://ci.example.test'), /Secure/);
  assert.match(cookie('127.0.0.1:8080', undefined, 'https'), /; Secure;/);
});

test("a form without the session's CSRF token changes nothing; without a session it goes to /login", async () => {
  const job = await runningJob(e2e, 'csrf', '  a:\n    script: [make]\n');
  const cookie = await session();
  let res = await fetch(`${stack.url}/jobs/${job.jobId}/cancel`, {
    method: 'POST',
    headers: { cookie },
    body: new URLSearchParams({ csrf: 'forged' }),
    redirect: 'manual',
  });
  assert.equal(res.status, 403);
  res = await fetch(`${stack.url}/jobs/${job.jobId}/cancel`, {
    method: 'POST',
    body: new URLSearchParams({ csrf: 'forged' }),
    redirect: 'manual',
  });
  assert.equal(res.status, 302);
  assert.match(res.headers.get('location')!, /^\/login\?next=/);
  assert.equal((await getJob(stack, job.jobId)).job.state, 'running');

  // With the token from the page, the cancel goes through.
  const pageHtml = await (await get(`/jobs/${job.jobId}`, { cookie })).text();
  const csrf =
    /action="\/jobs\/[^"]+\/cancel"><input type="hidden" name="csrf" value="([^"]+)"/.exec(
      pageHtml,
    )?.[1];
  assert.ok(csrf, 'the page has a cancel form with its token');
  res = await fetch(`${stack.url}/jobs/${job.jobId}/cancel`, {
    method: 'POST',
    headers: { cookie },
    body: new URLSearchParams({ csrf }),
    redirect: 'manual',
  });
  assert.equal(res.status, 303);
  assert.equal(res.headers.get('location'), `/jobs/${job.jobId}`);
  assert.equal((await getJob(stack, job.jobId)).job.state, 'cancelled');
});

test("a blocked job's page offers approve, and approving from it lets the job go on", async () => {
  const repo = e2e.projects.project.project.repo;
  const head = sha('fork-head');
  e2e.fake.setFile('mallory/paged', head, 'version: 1\ntasks:\n  a:\n    script: [make]\n');
  e2e.fake.setFile(repo, head, 'version: 1\ntasks:\n  a:\n    script: [make]\n');
  const hook = await sendWebhook(
    stack,
    'github',
    'pull_request',
    githubPullRequest('opened', { repo, number: 7, headSha: head, headRepo: 'mallory/paged' }),
    { secret: e2e.projects.project.secret },
  );
  assert.equal(hook.status, 202, hook.text);
  const jobId = hook.body.job_id;
  assert.equal((await getJob(stack, jobId)).job.state, 'blocked');
  const cookie = await session();
  const pageHtml = await (await get(`/jobs/${jobId}`, { cookie })).text();
  assert.match(pageHtml, /data-job-state="blocked"/);
  const csrf =
    /action="\/jobs\/[^"]+\/approve"><input type="hidden" name="csrf" value="([^"]+)"/.exec(
      pageHtml,
    )?.[1];
  assert.ok(csrf, 'the page has an approve form');
  const res = await fetch(`${stack.url}/jobs/${jobId}/approve`, {
    method: 'POST',
    headers: { cookie },
    body: new URLSearchParams({ csrf }),
    redirect: 'manual',
  });
  assert.equal(res.status, 303);
  const view = await waitForJob(
    stack,
    jobId,
    (v) => v.job.state !== 'blocked' && v.job.state !== 'pending',
  );
  assert.equal(view.job.state, 'running');
  assert.equal(view.job.trusted, false, 'approval never grants trust');
});

test('a log over 1 MiB: the API answers it page by page, the job page shows its last MiB numbered from the right line, and "load earlier" brings the rest', async () => {
  const job = await runningJob(e2e, 'big', '  a:\n    script: [make]\n');
  const task = await claimTask(stack, job.token);
  const lines = Array.from({ length: 60_000 }, (_, i) => `line ${i + 1} ${'x'.repeat(30)}\n`);
  const full = lines.join('');
  let offset = 0;
  for (let i = 0; i < lines.length; i += 20_000) {
    const data = lines.slice(i, i + 20_000).join('');
    const res = await uploadLog(stack, job.token, task.id, {
      lease_id: task.lease_id,
      offset,
      data,
    });
    assert.equal(res.status, 200, res.text);
    offset += Buffer.byteLength(data);
  }
  assert.ok(offset > 2 * 1024 * 1024);

  // The API: at most `limit` bytes, x-log-end names the next page.
  let got = '';
  let at = 0;
  for (let pages = 0; at < offset; pages++) {
    assert.ok(pages < 10);
    const res = await stack.call('GET', `/v1/tasks/${task.id}/log?offset=${at}&limit=700000`, {
      token: stack.adminToken,
    });
    assert.equal(res.status, 200, res.text);
    assert.ok(Buffer.byteLength(res.text) <= 700_000);
    assert.equal(res.headers.get('x-log-size'), String(offset));
    got += res.text;
    at = Number(res.headers.get('x-log-end'));
  }
  assert.equal(got, full);
  const tooBig = await stack.call('GET', `/v1/tasks/${task.id}/log?limit=${2 * 1024 * 1024}`, {
    token: stack.adminToken,
  });
  assert.equal(tooBig.status, 400);
  assert.match(tooBig.text, /limit/);

  // The CLI reads every page.
  const out: string[] = [];
  const code = await runCtl(['log', task.id, '--url', stack.url], {
    out: (l) => out.push(l),
    env: { CONDUCTOR_ADMIN_TOKEN: stack.adminToken },
  });
  assert.equal(code, 0);
  assert.equal(out.join('\n'), full);

  // The page's raw download, page by page, for a session (or a signed link).
  let raw = '';
  for (let at = 0, pages = 0; at < offset; pages++) {
    assert.ok(pages < 10);
    const res = await get(`/jobs/${job.jobId}/raw?task=${task.id}&attempt=1&offset=${at}`, {
      cookie: await sessionCookieOnce(),
    });
    assert.equal(res.status, 200);
    raw += await res.text();
    at = Number(res.headers.get('x-log-end'));
  }
  assert.equal(raw, full);

  // The page: the last MiB, starting at a whole line with its own number.
  const cookie = await session();
  const res = await get(`/jobs/${job.jobId}?task=${task.id}`, {
    cookie,
    'accept-encoding': 'gzip',
  });
  assert.equal(res.status, 200);
  assert.equal(res.headers.get('content-encoding'), 'gzip');
  const pageHtml = await res.text();
  const data = JSON.parse(
    /<script type="application\/json" id="page-data">(.*?)<\/script>/.exec(pageHtml)![1]!,
  );
  const shownFrom = data.firstLine as number;
  assert.ok(shownFrom > 1, 'the first lines are left for "load earlier"');
  const first = new RegExp(
    // data-t and the .ts span: the line's time, shown by the Timestamps box.
    `<span class="l" id="L${shownFrom}" data-t="\\d+"><a class="n" href="#L${shownFrom}" data-n="${shownFrom}" aria-label="line ${shownFrom}"></a><span class="ts" data-ts="[0-9:]{8}" title="[^"]+"></span>line ${shownFrom} x`,
  );
  assert.match(pageHtml, first);
  assert.match(pageHtml, /id="L60000".*line 60000 x/);
  assert.ok(offset - data.from <= 1024 * 1024);

  // "Load earlier", until the first line.
  let before = data.from as number;
  let line = shownFrom;
  while (before > 0) {
    const earlier = await get(`/jobs/${job.jobId}/log?task=${task.id}&attempt=1&before=${before}`, {
      cookie,
    });
    assert.equal(earlier.status, 200);
    const piece = (await earlier.json()) as {
      line: number;
      lines: number;
      html: string;
      from: number;
    };
    assert.equal(
      piece.line + piece.lines,
      line,
      'the earlier page ends where the shown one starts',
    );
    assert.match(piece.html, new RegExp(`id="L${piece.line}".*>line ${piece.line} x`));
    before = piece.from;
    line = piece.line;
  }
  assert.equal(line, 1);
});

test('the live route answers bad query values with a 400 naming them, and pages need no admin bearer token', async () => {
  const job = await runningJob(e2e, 'bad-query', '  a:\n    script: [make]\n');
  const cookie = await session();
  for (const [query, field] of [
    ['from=-1', 'from'],
    ['task=nope', 'task'],
    ['line=0', 'line'],
  ] as const) {
    const res = await get(`/jobs/${job.jobId}/live?${query}`, { cookie });
    assert.equal(res.status, 400, query);
    assert.match(await res.text(), new RegExp(field));
  }
  const live = await get(`/jobs/${job.jobId}/live`, { cookie });
  assert.equal(live.status, 200);
  const body = (await live.json()) as { state: string; tasks: { state: string }[] };
  assert.equal(body.state, 'running');
  assert.deepEqual(
    body.tasks.map((t: { state: string }) => t.state),
    ['queued'],
  );
  const worker = await createWorker(stack, ['unused'], 'unused');
  const asWorker = await get(`/jobs/${job.jobId}`, { authorization: `Bearer ${worker.token}` });
  assert.equal(asWorker.status, 302, 'a bearer token is no session');
});

// Guards a past open redirect: `next=/%09/evil.example` passed, and the
// browser, which drops tabs from URLs, went to //evil.example.
test('after signing in, the page goes to `next` only when it is a path of this site; a tab, a backslash, a scheme-relative or encoded form goes to /', async () => {
  const hostile = [
    '/%09/evil.example',
    '/\t/evil.example',
    '/\\evil.example',
    '//evil.example',
    '/%5cevil.example',
    '/%5Cevil.example',
    'https:evil.example',
    'https://evil.example/',
    '/%2F/evil.example',
    '/%252F/evil.example',
    '/%0d%0a/evil.example',
    '/../..//evil.example',
    '/%E2%80%8B/evil.example',
    'evil.example',
  ];
  for (const next of hostile) assert.equal(safeNext(next), '/', JSON.stringify(next));
  for (const next of ['/', '/projects/paged', '/jobs/abc?task=def&sig=1.2#L40']) {
    assert.equal(safeNext(next), next);
  }

  // Through the routes: the form's sign-in, and /login with a session already.
  const signIn = (next: string) =>
    fetch(`${stack.url}/login`, {
      method: 'POST',
      body: new URLSearchParams({ token: stack.adminToken, next }),
      redirect: 'manual',
    });
  for (const next of [
    '/%09/evil.example',
    '/\t/evil.example',
    '/%5cevil.example',
    '//evil.example',
  ]) {
    const res = await signIn(next);
    assert.equal(res.status, 303);
    assert.equal(res.headers.get('location'), '/', JSON.stringify(next));
    const again = await get(`/login?next=${encodeURIComponent(next)}`, {
      cookie: await sessionCookieOnce(),
    });
    assert.equal(again.headers.get('location'), '/', JSON.stringify(next));
  }
  const page = await get(`/login?next=${encodeURIComponent('/%09/evil.example')}`);
  assert.equal(page.status, 200);
  assert.ok(!(await page.text()).includes('evil.example'), 'the form does not carry it on');
  const good = await signIn('/projects/paged?before=3');
  assert.equal(good.headers.get('location'), '/projects/paged?before=3');
});

test('a log with OSC 8 hyperlinks renders their text and no link, on the page and in its live updates', async () => {
  const job = await runningJob(e2e, 'osc8', '  a:\n    script: [make]\n');
  const task = await claimTask(stack, job.token);
  const data =
    'see \u001b]8;;https://evil.example/login\u001b\\click here\u001b]8;;\u001b\\ now\n' +
    '\u001b]8;id=2;https://evil.example/\u0007or here\u001b]8;;\u0007\n';
  const res = await uploadLog(stack, job.token, task.id, {
    lease_id: task.lease_id,
    offset: 0,
    data,
  });
  assert.equal(res.status, 200, res.text);
  const cookie = await sessionCookieOnce();

  const html = await (await get(`/jobs/${job.jobId}?task=${task.id}`, { cookie })).text();
  const log = /<pre[^>]*data-log[^>]*>([\s\S]*?)<\/pre>/.exec(html)?.[1];
  assert.ok(log, 'the page has the log');
  assert.ok(!html.includes('evil.example'), 'the URL is nowhere on the page');
  // The only links in the log are the line numbers' own anchors.
  assert.deepEqual(
    [...log.matchAll(/<a\b[^>]*>/g)].map((m) => m[0]),
    [1, 2].map((n) => `<a class="n" href="#L${n}" data-n="${n}" aria-label="line ${n}">`),
  );
  assert.equal(log.replace(/<[^>]+>/g, ''), 'see click here now\nor here\n');

  const live = await get(`/jobs/${job.jobId}/live?task=${task.id}&attempt=1&from=0&line=1`, {
    cookie,
  });
  assert.equal(live.status, 200);
  const piece = ((await live.json()) as { log: { html: string } }).log.html;
  assert.ok(!piece.includes('evil.example'));
  assert.equal([...piece.matchAll(/<a\b/g)].length, 2, 'the two line anchors only');
});
