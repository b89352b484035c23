// Who may read a job page, in a real browser: without a session a private job
// sends you to /login, whether or not it exists; the commit status's signed
// link opens it (and nothing else); a tampered link is a 403; a public
// project's page opens for anyone. And every value on the page is escaped.
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { test } from 'node:test';
import { claimTask, complete, createProject, createWorker, uploadLog } from '../e2e/calls.ts';
import { projectOn, pushSettled, statusStack } from '../statuses/support.ts';
import { launchBrowser, newPage, signIn } from './support.ts';

const PUBLIC_URL = 'https://ci.example.test';
const { fake, stack } = await statusStack(import.meta.filename, {
  CONDUCTOR_PUBLIC_URL: PUBLIC_URL,
  // The fake forge is on loopback.
  CONDUCTOR_ALLOW_PRIVATE_FORGES: '1',
});
const browser = await launchBrowser();

/** The status's target_url, pointed at this stack instead of the public host. */
const onStack = (targetUrl: string) => targetUrl.replace(PUBLIC_URL, stack.url);

test('a private job page without a session goes to /login, opens with the commit status link, and answers 403 to a tampered one', async () => {
  const { p, commit } = await projectOn(
    stack,
    fake,
    'github',
    'private',
    '  a:\n    script: [make]\n',
  );
  const { jobId, posts } = await pushSettled(stack, fake, p, commit);
  const target = String(posts[0]!.body.target_url);
  assert.match(target, new RegExp(`^${PUBLIC_URL}/jobs/${jobId}\\?sig=\\d+\\.[\\w-]{43}$`));

  const { page } = await newPage(browser);
  let res = await page.goto(`${stack.url}/jobs/${jobId}`);
  assert.equal(new URL(page.url()).pathname, '/login');
  assert.equal(new URL(page.url()).searchParams.get('next'), `/jobs/${jobId}`);
  assert.equal(await page.locator('[data-job-state]').count(), 0);

  // An unknown job is answered the same way: the page says nothing about existence.
  const unknown = await fetch(`${stack.url}/jobs/${randomUUID()}`, { redirect: 'manual' });
  const known = await fetch(`${stack.url}/jobs/${jobId}`, { redirect: 'manual' });
  assert.equal(unknown.status, 302);
  assert.equal(known.status, 302);
  assert.equal(new URL(unknown.headers.get('location')!, stack.url).pathname, '/login');

  res = await page.goto(onStack(target));
  assert.equal(res?.status(), 200);
  assert.equal(await page.locator('[data-job-state]').getAttribute('data-job-state'), 'running');
  assert.equal(await page.locator('[data-task-name="a"]').count(), 1);
  assert.equal(
    await page.locator('form[action$="/cancel"]').count(),
    0,
    'no actions without a session',
  );
  // The link's own task links and polls keep working with the signature.
  await page.locator('[data-task-name="a"]').click();
  await page.waitForURL((u) => u.searchParams.has('task'));
  assert.equal(await page.locator('[data-log]').count(), 1);

  const sig = new URL(target).searchParams.get('sig')!;
  const flipped = `${sig.slice(0, -1)}${sig.endsWith('A') ? 'B' : 'A'}`;
  res = await page.goto(`${stack.url}/jobs/${jobId}?sig=${flipped}`);
  assert.equal(res?.status(), 403);
  const expiredSig = `1.${sig.split('.')[1]}`;
  res = await page.goto(`${stack.url}/jobs/${jobId}?sig=${expiredSig}`);
  assert.equal(res?.status(), 403);
  // The same for a job that does not exist.
  res = await page.goto(`${stack.url}/jobs/${randomUUID()}?sig=${sig}`);
  assert.equal(res?.status(), 403);
  // One job's signature opens no other job.
  const other = await pushSettled(stack, fake, p, commit, 'refs/heads/other');
  res = await page.goto(`${stack.url}/jobs/${other.jobId}?sig=${sig}`);
  assert.equal(res?.status(), 403);

  // Signed in, the page opens without a link and offers the actions.
  await signIn(page, stack, `/jobs/${jobId}`);
  assert.equal(await page.locator('[data-job-state]').getAttribute('data-job-state'), 'running');
  assert.equal(await page.locator('form[action$="/cancel"]').count(), 1);
});

test("a public project's pages open for anyone, without actions", async () => {
  const { p, commit } = await projectOn(
    stack,
    fake,
    'github',
    'open',
    '  a:\n    script: [make]\n',
  );
  const patched = await stack.call('PATCH', `/v1/projects/${p.id}`, {
    token: stack.adminToken,
    body: { visibility: 'public' },
  });
  assert.equal(patched.status, 200, patched.text);
  const { jobId } = await pushSettled(stack, fake, p, commit);
  const { page } = await newPage(browser);
  const res = await page.goto(`${stack.url}/jobs/${jobId}`);
  assert.equal(res?.status(), 200);
  assert.equal(await page.locator('[data-task-name="a"]').count(), 1);
  assert.equal(await page.locator('form[action$="/cancel"]').count(), 0);
  await page.goto(`${stack.url}/`);
  assert.equal(await page.locator(`a[href="/projects/${p.id}"]`).count(), 1);
  assert.equal(
    await page.locator('a[href="/projects/private"]').count(),
    0,
    'private projects are not listed',
  );
});

test('a sign-in with a wrong token is refused, and signing out ends the session', async () => {
  const { page } = await newPage(browser);
  await page.goto(`${stack.url}/login`);
  await page.fill('#token', 'not-the-token-at-all');
  await page.click('button[type=submit]');
  assert.match((await page.locator('[role=alert]').textContent()) ?? '', /not the admin token/);
  await signIn(page, stack);
  const [cookie] = await page.context().cookies();
  assert.equal(cookie?.httpOnly, true);
  assert.equal(cookie?.sameSite, 'Strict');
  // The stack's public URL is https (CONDUCTOR_PUBLIC_URL): the cookie is
  // Secure even when the page is reached on loopback (Chromium keeps it there).
  assert.equal(cookie?.secure, true, 'Secure: the public URL is https');
  await page.getByRole('button', { name: 'Sign out' }).click();
  await page.waitForURL((u) => u.pathname === '/');
  assert.deepEqual(await page.context().cookies(), []);
});

const EVIL = '<script>window.pwned=1</script>"><img src=x onerror="window.pwned=2">';

test('task names, refs, errors and logs holding markup are shown as text, never run', async () => {
  // A project of its own, whose pipeline names a task and its error after EVIL.
  const { project, secret } = await createProject(stack, {
    id: 'evil',
    name: `evil ${EVIL}`,
    forge: 'github',
    repo: 'octo-org/evil',
    repo_url: 'https://github.example/octo-org/evil.git',
  });
  assert.ok(secret);
  const { token } = await createWorker(stack, ['evil'], 'runner-evil');
  const commit = 'e'.repeat(40);
  // Task keys are plain words; a matrix value goes into the task's name as written.
  fake.setFile(
    project.repo,
    commit,
    `version: 1\ndefaults:\n  labels: [evil]\ntasks:\n  x:\n    matrix:\n      v: [${JSON.stringify(EVIL)}]\n    script: [make]\n`,
  );
  const ref = `refs/heads/${EVIL.replace(/\s/g, '')}`;
  const { sendWebhook, waitForJob } = await import('../e2e/calls.ts');
  const { githubPush } = await import('../forge/fixtures/github.ts');
  const hook = await sendWebhook(
    stack,
    'github',
    'push',
    githubPush(project.repo, commit, { ref }),
    {
      secret,
    },
  );
  assert.equal(hook.status, 202, hook.text);
  const view = await waitForJob(stack, hook.body.job_id);
  assert.equal(view.job.state, 'running', JSON.stringify(view.job));
  const task = await claimTask(stack, token);
  await uploadLog(stack, token, task.id, { lease_id: task.lease_id, offset: 0, data: `${EVIL}\n` });
  await complete(stack, token, task.id, {
    lease_id: task.lease_id,
    outcome: 'failed',
    exit_code: 1,
    error: EVIL,
  });

  const { page } = await newPage(browser);
  const dialogs: string[] = [];
  page.on('dialog', (d) => {
    dialogs.push(d.message());
    void d.dismiss();
  });
  await signIn(page, stack);
  for (const path of [
    '/',
    `/projects/${project.id}`,
    `/jobs/${hook.body.job_id}?task=${task.id}`,
  ]) {
    await page.goto(`${stack.url}${path}`);
    assert.equal(await page.evaluate('window.pwned'), undefined, path);
    assert.equal(await page.locator('main img').count(), 0, `${path}: no <img> was made`);
  }
  assert.equal(
    await page.locator('[data-task-name]').getAttribute('data-task-name'),
    view.tasks[0].name,
  );
  assert.equal(await page.locator('[data-log]').textContent(), `${EVIL}\n`);
  assert.match((await page.locator('main').textContent()) ?? '', /window\.pwned=2/);
  assert.deepEqual(dialogs, []);
});
