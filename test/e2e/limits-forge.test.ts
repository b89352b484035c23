// Forge URLs (docs/limits.md): repo_url and forge_url carry no credentials,
// query or fragment; a redirect from a forge is an error naming the URL; a
// new forge_url drops the stored token. (Private addresses, refused when
// CONDUCTOR_ALLOW_PRIVATE_FORGES is unset: limits-private-forge.test.ts.)
import assert from 'node:assert/strict';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { after, test } from 'node:test';
import { giteaPush } from '../forge/fixtures/gitea.ts';
import { assertBadRequest } from './assertions.ts';
import { type CreatedProject, createProject, sendWebhook, startE2E, waitForJob } from './calls.ts';
import { sha } from './payloads.ts';

const { fake, stack } = await startE2E(import.meta.filename);
const admin = { token: stack.adminToken };

/** A forge whose every answer is a redirect to the cloud metadata service. */
const redirecting = createServer((req, res) => {
  req.resume();
  res.writeHead(302, { location: 'http://169.254.169.254/latest/meta-data/iam/' });
  res.end();
});
await new Promise<void>((done) => redirecting.listen(0, '127.0.0.1', () => done()));
after(() => new Promise<void>((done) => redirecting.close(() => done())));
const redirectUrl = `http://127.0.0.1:${(redirecting.address() as AddressInfo).port}`;

function giteaProject(id: string, body: Record<string, unknown> = {}) {
  return {
    id,
    name: id,
    forge: 'gitea',
    repo: `acme/${id}`,
    repo_url: `https://gitea.example/acme/${id}.git`,
    forge_url: fake.url,
    ...body,
  };
}

test('repo_url and forge_url with a user name, password, query or fragment are refused, naming the field', async () => {
  const bad: Array<[string, string, RegExp]> = [
    ['repo_url', 'https://user:s3cr3t@gitea.example/acme/x.git', /user name or password/],
    ['repo_url', 'https://token@gitea.example/acme/x.git', /user name or password/],
    ['repo_url', 'https://gitea.example/acme/x.git?', /query/],
    ['repo_url', 'https://gitea.example/acme/x.git#main', /fragment/],
    ['forge_url', 'https://user:pw@gitea.example', /user name or password/],
    ['forge_url', 'http://gitea.example/latest/meta-data?', /query/],
    ['forge_url', 'http://gitea.example/x#', /fragment/],
  ];
  for (const [field, value, why] of bad) {
    const created = await stack.call('POST', '/v1/projects', {
      ...admin,
      body: giteaProject('refused', { [field]: value }),
    });
    assertBadRequest(created, field);
    assert.match(created.body.error.message, why, created.text);
  }
  await createProject(stack, giteaProject('patched'));
  for (const [field, value] of bad) {
    const patched = await stack.call('PATCH', '/v1/projects/patched', {
      ...admin,
      body: { [field]: value },
    });
    assertBadRequest(patched, field);
  }
  const shown = await stack.call('GET', '/v1/projects/patched', admin);
  assert.equal(shown.body.project.forge_url, fake.url, 'nothing was changed');
  // A local path may have any characters a file name may.
  await createProject(stack, giteaProject('local', { repo_url: '/srv/git/odd?name#1' }));
});

test('changing forge_url without giving forge_token again drops the stored token', async () => {
  await createProject(stack, giteaProject('moving', { forge_token: 'gitea-token-1' }));
  const moved = await stack.call('PATCH', '/v1/projects/moving', {
    ...admin,
    body: { forge_url: 'https://elsewhere.example' },
  });
  assert.equal(moved.status, 200, moved.text);
  assert.equal(moved.body.project.has_forge_token, false);

  const both = await stack.call('PATCH', '/v1/projects/moving', {
    ...admin,
    body: { forge_url: 'https://gitea.example', forge_token: 'gitea-token-2' },
  });
  assert.equal(both.body.project.has_forge_token, true, 'given again, the token is kept');
  const same = await stack.call('PATCH', '/v1/projects/moving', {
    ...admin,
    body: { forge_url: 'https://gitea.example/', name: 'Moving' },
  });
  assert.equal(same.body.project.has_forge_token, true, 'the same forge_url keeps it');
  const renamed = await stack.call('PATCH', '/v1/projects/moving', {
    ...admin,
    body: { name: 'Renamed' },
  });
  assert.equal(renamed.body.project.has_forge_token, true);
});

test('a forge that answers with a redirect fails the job, naming the URL, and is not followed', async () => {
  const created: CreatedProject = await createProject(
    stack,
    giteaProject('redirected', { forge_url: redirectUrl, forge_token: 'gitea-token' }),
  );
  const commit = sha('redirected');
  const hook = await sendWebhook(stack, 'gitea', 'push', giteaPush('acme/redirected', commit), {
    secret: created.secret,
  });
  assert.equal(hook.status, 202, hook.text);
  const view = await waitForJob(stack, hook.body.job_id);
  assert.equal(view.job.state, 'failed');
  assert.equal(
    view.job.error,
    `${redirectUrl}/api/v1/repos/acme/redirected/raw/.conductor.yml?ref=${commit} answered HTTP 302, a redirect to http://169.254.169.254/latest/meta-data/iam/: forge requests do not follow redirects (check the URL)`,
  );
});
