// Sign-in with Gitea (or Forgejo): the same flow as GitHub's under the
// instance's URL, asking for read:user only; the person is read from
// /api/v1/user and their permission from Gitea's collaborators route, owner
// counting as admin. A project on another Gitea, or on GitHub, is not
// answered for a Gitea person: they are told to ask an admin.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { createProject, deliverRunning, startE2E } from '../e2e/calls.ts';
import { pipeline, sha } from '../e2e/payloads.ts';
import { giteaPush } from '../forge/fixtures/gitea.ts';
import { startFakeOAuth } from '../helpers/fake-oauth.ts';

const oauth = await startFakeOAuth();
const e2e = await startE2E(import.meta.filename, {
  env: {
    CONDUCTOR_GITEA_URL: oauth.url,
    CONDUCTOR_GITEA_CLIENT_ID: oauth.clientId,
    CONDUCTOR_GITEA_CLIENT_SECRET: oauth.clientSecret,
  },
});
oauth.fallback = e2e.fake.url;
const { stack } = e2e;

const { project, secret } = await createProject(stack, {
  id: 'tea',
  name: 'tea',
  forge: 'gitea',
  repo: 'acme/tea',
  repo_url: 'https://gitea.example/acme/tea.git',
  forge_url: oauth.url,
  forge_token: 'gitea-project-token',
});

const cookieOf = (res: Response, name: string) =>
  res.headers
    .getSetCookie()
    .find((c) => c.startsWith(`${name}=`))
    ?.split(';')[0];

async function signInAs(login: string): Promise<string> {
  oauth.signInAs = login;
  const start = await fetch(`${stack.url}/login/gitea`, { redirect: 'manual' });
  assert.equal(start.status, 302, await start.text());
  const atProvider = await fetch(start.headers.get('location')!, { redirect: 'manual' });
  const done = await fetch(atProvider.headers.get('location')!, {
    headers: { cookie: cookieOf(start, 'conductor_oauth')! },
    redirect: 'manual',
  });
  assert.equal(done.status, 200, await done.clone().text());
  assert.match(await done.text(), /Signed in with Gitea as <strong data-signed-in-as>@/);
  return cookieOf(done, 'conductor_session')!;
}

async function job(label: string): Promise<string> {
  const commit = sha(label);
  e2e.fake.setFile(project.repo, commit, pipeline(label, '  a:\n    script: [make]\n'));
  const { hook } = await deliverRunning(
    stack,
    'gitea',
    'push',
    giteaPush(project.repo, commit, { ref: `refs/heads/${label}` }),
    secret,
  );
  return hook.body.job_id;
}

test('/login offers Gitea, which asks for read:user only and sends the person back to its callback', async () => {
  const text = await (await fetch(`${stack.url}/login`)).text();
  assert.match(text, /Sign in with Gitea/);
  assert.doesNotMatch(text, /Sign in with GitHub/);
  const start = await fetch(`${stack.url}/login/gitea`, { redirect: 'manual' });
  const to = new URL(start.headers.get('location')!);
  assert.equal(`${to.origin}${to.pathname}`, `${oauth.url}/login/oauth/authorize`);
  assert.equal(to.searchParams.get('scope'), 'read:user');
  assert.equal(to.searchParams.get('code_challenge_method'), 'S256');
  assert.equal(to.searchParams.get('redirect_uri'), `${stack.url}/login/gitea/callback`);
});

test("a Gitea owner may see the project's jobs; Gitea was asked with the project's token", async () => {
  const jobId = await job('tea-owner');
  oauth.setPermission('acme/tea', 'olga', 'owner');
  const cookie = await signInAs('olga');
  const res = await fetch(`${stack.url}/jobs/${jobId}`, {
    headers: { cookie },
    redirect: 'manual',
  });
  assert.equal(res.status, 200);
  const asked = oauth.permissionRequests.find((r) => r.login === 'olga')!;
  assert.equal(asked.authorization, 'token gitea-project-token');
  const home = await (await fetch(`${stack.url}/`, { headers: { cookie } })).text();
  assert.match(home, /href="\/projects\/tea"/);
});

test('a Gitea person sees a private project on another Gitea or on GitHub exactly as a missing one', async () => {
  await createProject(stack, {
    id: 'elsewhere',
    name: 'elsewhere',
    forge: 'gitea',
    repo: 'acme/brew',
    repo_url: 'https://other.example/acme/brew.git',
    forge_url: 'https://other.example',
    forge_token: 'other-token',
  });
  await createProject(stack, {
    id: 'hub',
    name: 'hub',
    forge: 'github',
    repo: 'acme/tea',
    repo_url: 'https://github.com/acme/tea.git',
    forge_token: 'hub-token',
  });
  oauth.setPermission('acme/tea', 'olga', 'owner');
  const cookie = await signInAs('olga');
  // Neither the repository nor the other Gitea's address is told: a 404 as for no project.
  const other = await fetch(`${stack.url}/projects/elsewhere`, { headers: { cookie } });
  assert.equal(other.status, 404);
  const otherText = await other.text();
  assert.match(otherText, /project elsewhere does not exist/);
  assert.doesNotMatch(otherText, /other\.example|acme\/brew/);
  const hub = await fetch(`${stack.url}/projects/hub`, { headers: { cookie } });
  assert.equal(hub.status, 404);
  assert.match(await hub.text(), /project hub does not exist/);
  const none = await fetch(`${stack.url}/projects/nowhere`, { headers: { cookie } });
  assert.equal(none.status, 404);
  assert.match(await none.text(), /project nowhere does not exist/);
});
