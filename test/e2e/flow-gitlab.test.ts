// GitLab as the third forge (issue #55), through the local stack against a fake GitLab on
// loopback: GitLab's documented payloads (push, tag push, merge requests from the project and
// from a fork) become jobs; the token is checked, the event UUID dedupes; statuses reach
// GitLab under its state names with the job's link; sign-in with GitLab OAuth (PKCE,
// read_user) and what the project's members may do: a Developer reruns from the job page (the
// form's CSRF token with the session cookie), a Reporter is refused with the reason.
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { test } from 'node:test';
import {
  GL_REPO,
  gitlabMergeRequest,
  gitlabPush,
  gitlabTagPush,
} from '../forge/fixtures/gitlab.ts';
import { startFakeGitlab } from '../helpers/fake-gitlab.ts';
import { type TestStack, testStack } from '../helpers/stack.ts';
import { claimTask, complete, createProject, createWorker, getJob, waitForJob } from './calls.ts';
import { pipeline, sha } from './payloads.ts';

const gitlab = await startFakeGitlab();
const PUBLIC = 'https://ci.example.com';
const stack: TestStack = await testStack(import.meta.filename, {
  CONDUCTOR_PUBLIC_URL: PUBLIC,
  CONDUCTOR_GITLAB_URL: gitlab.url,
  CONDUCTOR_GITLAB_CLIENT_ID: gitlab.clientId,
  CONDUCTOR_GITLAB_CLIENT_SECRET: gitlab.clientSecret,
});

const { project, secret } = await createProject(stack, {
  id: 'gl-api',
  name: 'api',
  forge: 'gitlab',
  repo: GL_REPO,
  repo_url: `https://gitlab.example.com/${GL_REPO}.git`,
  forge_url: gitlab.url,
  forge_token: gitlab.token,
});

/** Sends a delivery as GitLab does: its event, token, event UUID and instance headers. */
function deliver(
  event: string,
  payload: unknown,
  opts: { token?: string | null; uuid?: string } = {},
) {
  const headers: Record<string, string> = {
    'content-type': 'application/json',
    'user-agent': 'GitLab/17.5.0',
    'X-Gitlab-Event': event,
    'X-Gitlab-Event-UUID': opts.uuid ?? randomUUID(),
    'X-Gitlab-Webhook-UUID': '6f2c1f5e-4b7b-4b9e-9d4a-2f1f1c3f0a11',
    'X-Gitlab-Instance': 'https://gitlab.example.com',
  };
  const token = opts.token === undefined ? secret : opts.token;
  if (token !== null) headers['X-Gitlab-Token'] = token;
  return stack.call('POST', '/v1/webhooks/gitlab', { raw: JSON.stringify(payload), headers });
}

test('a GitLab project defaults its forge_url to gitlab.com and takes a full path with subgroups', async () => {
  assert.equal(project.forge, 'gitlab');
  assert.equal(project.forge_url, gitlab.url);
  const plain = await createProject(stack, {
    id: 'gl-com',
    name: 'com',
    forge: 'gitlab',
    repo: 'group/sub/deeper/name',
    repo_url: 'https://gitlab.com/group/sub/deeper/name.git',
  });
  assert.equal(plain.project.forge_url, 'https://gitlab.com');
  // GitHub's repo is still owner/name.
  const wrong = await stack.call('POST', '/v1/projects', {
    token: stack.adminToken,
    body: {
      id: 'gh-deep',
      name: 'x',
      forge: 'github',
      repo: 'a/b/c',
      repo_url: 'https://github.com/a/b.git',
    },
  });
  assert.equal(wrong.status, 400, wrong.text);
  assert.match(wrong.text, /repo.*must be owner\/name/);
});

test('a GitLab push runs to a successful job: the file is read at the commit, statuses go running then success with the job link', async () => {
  const commit = sha('gl-push');
  gitlab.setFile(GL_REPO, commit, pipeline('gl-push', '  build:\n    script: [make]\n'));
  const hook = await deliver('Push Hook', gitlabPush(GL_REPO, commit));
  assert.equal(hook.status, 202, hook.text);
  const view = await waitForJob(stack, hook.body.job_id);
  assert.equal(view.job.state, 'running', JSON.stringify(view.job));
  assert.equal(view.job.trigger, 'push');
  assert.equal(view.job.ref, 'refs/heads/main');
  assert.equal(view.job.trusted, true);

  // The repository files API, the project named by its encoded full path, the token as Bearer.
  const read = gitlab.calls.find((c) => c.rawPath.includes('/repository/files/'))!;
  assert.equal(
    read.rawPath,
    `/api/v4/projects/${encodeURIComponent(GL_REPO)}/repository/files/.conductor.yml/raw`,
  );
  assert.equal(read.query.ref, commit);
  assert.equal(read.authorization, `Bearer ${gitlab.token}`);

  const { token } = await createWorker(stack, ['gl-push'], 'gl-push');
  const task = await claimTask(stack, token);
  assert.deepEqual(task.repo, {
    url: `https://gitlab.example.com/${GL_REPO}.git`,
    sha: commit,
    ref: 'refs/heads/main',
    // The project's token, for a trusted job's clone (runner/git.ts: GitLab takes it as a password).
    token: gitlab.token,
  });
  const done = await complete(stack, token, task.id, {
    lease_id: task.lease_id,
    outcome: 'success',
    exit_code: 0,
  });
  assert.equal(done.status, 200, done.text);

  const posts = await gitlab.waitForStatuses(commit, 2);
  const states = posts.map((p) => p.body.state);
  assert.deepEqual(states.slice(-2), ['running', 'success'], JSON.stringify(states));
  for (const post of posts) {
    assert.equal(post.body.name, 'conductor/e2e');
    assert.ok(post.body.target_url.startsWith(`${PUBLIC}/jobs/${hook.body.job_id}?sig=`));
    assert.equal(post.authorization, `Bearer ${gitlab.token}`);
  }
});

test('a GitLab annotated tag builds the tagged commit (checkout_sha), not the tag object', async () => {
  const commit = sha('gl-tag-commit');
  gitlab.setFile(GL_REPO, commit, pipeline('gl-tag', '  release:\n    script: [make]\n'));
  const hook = await deliver(
    'Tag Push Hook',
    gitlabTagPush(GL_REPO, 'v1.0.0', commit, sha('gl-tag-object')),
  );
  assert.equal(hook.status, 202, hook.text);
  const { job } = await getJob(stack, hook.body.job_id);
  assert.equal(job.trigger, 'tag');
  assert.equal(job.ref, 'refs/tags/v1.0.0');
  assert.equal(job.sha, commit);
});

test('a merge request from the project itself is trusted and builds refs/merge-requests/N/head; an update without commits builds nothing; closing cancels it', async () => {
  const head = sha('gl-mr-head');
  gitlab.setFile(GL_REPO, head, pipeline('gl-mr', '  check:\n    script: [make]\n'));
  const hook = await deliver(
    'Merge Request Hook',
    gitlabMergeRequest('open', { repo: GL_REPO, iid: 7, headSha: head }),
  );
  assert.equal(hook.status, 202, hook.text);
  const view = await waitForJob(stack, hook.body.job_id);
  assert.equal(view.job.state, 'running');
  assert.equal(view.job.trigger, 'pull_request');
  assert.equal(view.job.ref, 'refs/merge-requests/7/head');
  assert.equal(view.job.trusted, true);

  const relabel = await deliver(
    'Merge Request Hook',
    gitlabMergeRequest('update', { repo: GL_REPO, iid: 7, headSha: head }),
  );
  assert.equal(relabel.status, 200, relabel.text);
  assert.match(relabel.body.ignored, /without new commits/);

  const closed = await deliver(
    'Merge Request Hook',
    gitlabMergeRequest('close', { repo: GL_REPO, iid: 7, headSha: head }),
  );
  assert.equal(closed.status, 200, closed.text);
  assert.equal(closed.body.cancelled, 1);
  assert.equal((await getJob(stack, hook.body.job_id)).job.state, 'cancelled');
  // GitLab's word for it.
  const posts = await gitlab.waitForStatuses(head, 1);
  await waitUntilState(head, 'canceled');
  assert.ok(posts.length >= 1);
});

test('a merge request from a fork is untrusted and waits for approval, reported as pending under its own name', async () => {
  const head = sha('gl-fork-head');
  const hook = await deliver(
    'Merge Request Hook',
    gitlabMergeRequest('open', { repo: GL_REPO, iid: 8, headSha: head, fork: 'mallory/api' }),
  );
  assert.equal(hook.status, 202, hook.text);
  const { job } = await getJob(stack, hook.body.job_id);
  assert.equal(job.trusted, false);
  assert.equal(job.state, 'blocked');
  assert.equal(job.trust_reason, 'a pull request from a fork');
  const [post] = await gitlab.waitForStatuses(head, 1);
  assert.equal(post!.body.state, 'pending');
  assert.equal(post!.body.name, 'conductor (untrusted)');
});

test('a wrong or missing X-Gitlab-Token answers 401 and writes nothing', async () => {
  const commit = sha('gl-bad-token');
  for (const token of ['not-the-secret', null, `${secret} `.repeat(2)]) {
    const res = await deliver('Push Hook', gitlabPush(GL_REPO, commit), { token });
    assert.equal(res.status, 401, res.text);
    assert.equal(res.body.error.code, 'unauthorized');
  }
  assert.equal(gitlab.calls.filter((c) => c.query.ref === commit).length, 0);
});

test('the same event UUID twice is one job; a missing UUID is a 400 naming the header', async () => {
  const commit = sha('gl-dedupe');
  gitlab.setFile(GL_REPO, commit, pipeline('gl-dedupe', '  a:\n    script: [make]\n'));
  const uuid = randomUUID();
  const first = await deliver('Push Hook', gitlabPush(GL_REPO, commit, { ref: 'refs/heads/dd' }), {
    uuid,
  });
  assert.equal(first.status, 202, first.text);
  // GitLab retries with the same UUID (and body).
  const again = await deliver('Push Hook', gitlabPush(GL_REPO, commit, { ref: 'refs/heads/dd' }), {
    uuid,
  });
  assert.equal(again.status, 200, again.text);
  assert.deepEqual(again.body, {
    job_id: first.body.job_id,
    number: first.body.number,
    duplicate: true,
  });
  const res = await stack.call('POST', '/v1/webhooks/gitlab', {
    raw: JSON.stringify(gitlabPush(GL_REPO, commit)),
    headers: { 'X-Gitlab-Event': 'Push Hook', 'X-Gitlab-Token': secret },
  });
  assert.equal(res.status, 400, res.text);
  assert.match(res.body.error.message, /X-Gitlab-Event-UUID/);
});

test('a push for a GitLab project nobody registered answers 404 with the command that registers it', async () => {
  const res = await deliver('Push Hook', gitlabPush('someone/else', sha('gl-unknown')));
  assert.equal(res.status, 404, res.text);
  assert.match(
    res.body.error.message,
    /project create --id else --forge gitlab --repo someone\/else --repo-url https:\/\/gitlab\.example\.com\/someone\/else\.git --forge-url https:\/\/gitlab\.example\.com/,
  );
});

// Sign-in: the pages' flow against the fake GitLab's OAuth application.
const cookieOf = (res: Response, name: string) =>
  res.headers
    .getSetCookie()
    .find((c) => c.startsWith(`${name}=`))
    ?.split(';')[0];

async function signInAs(username: string): Promise<string> {
  gitlab.signInAs = { id: 40 + username.length, username };
  const start = await fetch(`${stack.url}/login/gitlab`, { redirect: 'manual' });
  assert.equal(start.status, 302, await start.text());
  const atGitlab = await fetch(start.headers.get('location')!, { redirect: 'manual' });
  assert.equal(atGitlab.status, 302, await atGitlab.text());
  // GitLab sends the browser back to the public URL, which is this stack.
  const back = atGitlab.headers.get('location')!.replace(PUBLIC, stack.url);
  const done = await fetch(back, {
    headers: { cookie: cookieOf(start, 'conductor_oauth')! },
    redirect: 'manual',
  });
  assert.equal(done.status, 200, await done.clone().text());
  assert.match(await done.text(), /Signed in with GitLab as <strong data-signed-in-as>@/);
  return cookieOf(done, 'conductor_session')!;
}

test('sign-in with GitLab asks for read_user with PKCE, and a member sees what their role lets them', async () => {
  const page = await (await fetch(`${stack.url}/login`)).text();
  assert.match(page, /Sign in with GitLab/);
  const start = await fetch(`${stack.url}/login/gitlab`, { redirect: 'manual' });
  const to = new URL(start.headers.get('location')!);
  assert.equal(`${to.origin}${to.pathname}`, `${gitlab.url}/oauth/authorize`);
  assert.equal(to.searchParams.get('scope'), 'read_user');
  assert.equal(to.searchParams.get('code_challenge_method'), 'S256');
  assert.equal(to.searchParams.get('redirect_uri'), `${PUBLIC}/login/gitlab/callback`);

  const commit = sha('gl-people');
  gitlab.setFile(GL_REPO, commit, pipeline('gl-people', '  a:\n    script: [make]\n'));
  const hook = await deliver('Push Hook', gitlabPush(GL_REPO, commit, { ref: 'refs/heads/pp' }));
  assert.equal(hook.status, 202, hook.text);
  const jobPage = `${stack.url}/jobs/${hook.body.job_id}`;

  gitlab.setMember(GL_REPO, 'devon', 30); // Developer
  gitlab.setMember(GL_REPO, 'gus', 10); // Guest
  const devon = await signInAs('devon');
  // The token exchange carried the PKCE verifier and the client secret (the fake checked both).
  assert.ok(gitlab.tokenRequests.at(-1)?.code_verifier);
  assert.equal((await fetch(jobPage, { headers: { cookie: devon } })).status, 200);
  const asked = gitlab.calls.find((c) => c.rawPath.endsWith('/members/all'))!;
  assert.equal(asked.query.query, 'devon');
  assert.equal(asked.authorization, `Bearer ${gitlab.token}`);
  // A Guest cannot read a private project's code: to them the job is not there.
  const gus = await signInAs('gus');
  assert.equal((await fetch(jobPage, { headers: { cookie: gus } })).status, 404);
});

/** A finished job of the GitLab project: pushed, its one task run to success by a runner. */
async function finishedGitlabJob(label: string): Promise<string> {
  const commit = sha(label);
  gitlab.setFile(GL_REPO, commit, pipeline(label, '  a:\n    script: [make]\n'));
  const hook = await deliver(
    'Push Hook',
    gitlabPush(GL_REPO, commit, { ref: `refs/heads/${label}` }),
  );
  assert.equal(hook.status, 202, hook.text);
  await waitForJob(stack, hook.body.job_id);
  const { token } = await createWorker(stack, [label], label);
  const task = await claimTask(stack, token);
  const done = await complete(stack, token, task.id, {
    lease_id: task.lease_id,
    outcome: 'success',
    exit_code: 0,
  });
  assert.equal(done.status, 200, done.text);
  assert.equal((await getJob(stack, hook.body.job_id)).job.state, 'success');
  return hook.body.job_id;
}

/** The CSRF token of the rerun form on the job page, as the browser would read it. */
async function csrfOf(jobId: string, cookie: string): Promise<string> {
  const res = await fetch(`${stack.url}/jobs/${jobId}`, { headers: { cookie } });
  assert.equal(res.status, 200);
  const text = await res.text();
  assert.match(text, new RegExp(`action="/jobs/${jobId}/rerun"`), 'the page offers Rerun');
  const match = /name="csrf" value="([^"]+)"/.exec(text);
  assert.ok(match, 'the page carries a CSRF token');
  return match[1]!;
}

function postRerun(jobId: string, cookie: string, csrf: string) {
  return fetch(`${stack.url}/jobs/${jobId}/rerun`, {
    method: 'POST',
    headers: { cookie },
    body: new URLSearchParams({ csrf }),
    redirect: 'manual',
  });
}

test('a GitLab Developer reruns a finished job from its page; the rerun is audited with their login', async () => {
  const jobId = await finishedGitlabJob('gl-dev-rerun');
  gitlab.setMember(GL_REPO, 'dora', 30); // Developer
  const dora = await signInAs('dora');
  // The form's CSRF token is part of the request: without it the POST is a stale form (403),
  // whatever the person may do, and nothing is rerun.
  const bare = await postRerun(jobId, dora, '');
  assert.equal(bare.status, 403);
  assert.match(await bare.text(), /The form was stale or not sent from this site/);
  const res = await postRerun(jobId, dora, await csrfOf(jobId, dora));
  assert.equal(res.status, 303, await res.text());
  const location = res.headers.get('location') ?? '';
  assert.match(location, /^\/jobs\/[0-9a-f-]{36}$/);
  assert.notEqual(location, `/jobs/${jobId}`, 'a new job');
  const rerun = await getJob(stack, location.slice('/jobs/'.length));
  assert.equal(rerun.job.sha, sha('gl-dev-rerun'));
  const audit = await stack.call('GET', `/v1/projects/${project.id}/audit?limit=5`, {
    token: stack.adminToken,
  });
  assert.equal(audit.status, 200, audit.text);
  const event = audit.body.events.find((e: { job_id?: string }) => e.job_id === jobId);
  assert.ok(event, JSON.stringify(audit.body.events));
  assert.equal(event.actor, '@dora');
  assert.equal(event.action, 'rerun');
  assert.match(event.session_id, /^[0-9a-f-]{36}$/);
  assert.equal(
    audit.body.events.filter((e: { job_id?: string }) => e.job_id === jobId).length,
    1,
    'one rerun: the bare POST made none',
  );
  const text = await (
    await fetch(`${stack.url}/jobs/${jobId}`, { headers: { cookie: dora } })
  ).text();
  assert.match(text, /rerun by <strong>@dora<\/strong>/);
});

test('a GitLab Reporter may look but not rerun: 403 with the reason, nothing rerun or audited', async () => {
  const jobId = await finishedGitlabJob('gl-rep-rerun');
  gitlab.setMember(GL_REPO, 'remy', 20); // Reporter
  const remy = await signInAs('remy');
  const page = await fetch(`${stack.url}/jobs/${jobId}`, { headers: { cookie: remy } });
  assert.equal(page.status, 200);
  const csrf = /name="csrf" value="([^"]+)"/.exec(await page.text())?.[1] ?? '';
  const res = await postRerun(jobId, remy, csrf);
  assert.equal(res.status, 403);
  assert.match(
    await res.text(),
    new RegExp(
      `GitLab says @remy has read access to ${GL_REPO}; rerunning a job needs write access`,
    ),
  );
  const audit = await stack.call('GET', `/v1/projects/${project.id}/audit`, {
    token: stack.adminToken,
  });
  assert.equal(audit.body.events.filter((e: { job_id?: string }) => e.job_id === jobId).length, 0);
});

async function waitUntilState(commit: string, state: string): Promise<void> {
  // A deadline for a loaded machine, not a speed claim.
  const deadline = Date.now() + 30_000;
  while (!gitlab.statusesFor(commit).some((p) => p.body.state === state)) {
    if (Date.now() > deadline) {
      throw new Error(
        `no ${state} status for ${commit}: ${JSON.stringify(gitlab.statusesFor(commit).map((p) => p.body))}`,
      );
    }
    await new Promise((r) => setTimeout(r, 10));
  }
}
