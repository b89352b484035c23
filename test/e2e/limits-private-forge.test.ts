// Without CONDUCTOR_ALLOW_PRIVATE_FORGES the control plane refuses to call a
// forge on a loopback, private or link-local address, checked after the name
// is resolved: the fake forge on 127.0.0.1 is never asked, by address or by a
// name that resolves to it. A stack of its own (the setting is the process's).
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { giteaPush } from '../forge/fixtures/gitea.ts';
import { githubPush } from '../forge/fixtures/github.ts';
import { createProject, sendWebhook, startE2E, waitForJob } from './calls.ts';
import { pipeline, sha } from './payloads.ts';

const { fake, stack } = await startE2E(import.meta.filename, {
  // '' is unset: the default, which refuses private addresses.
  env: { CONDUCTOR_ALLOW_PRIVATE_FORGES: '' },
});
const port = new URL(fake.url).port;

test('a forge at a loopback address is refused before any request, naming the URL', async () => {
  // GitHub's API base is the fake forge (CONDUCTOR_GITHUB_API_URL=http://127.0.0.1:...).
  const created = await createProject(stack, {
    id: 'loopback',
    name: 'loopback',
    forge: 'github',
    repo: 'acme/loopback',
    repo_url: 'https://github.com/acme/loopback.git',
  });
  const commit = sha('loopback');
  fake.setFile('acme/loopback', commit, pipeline('x', '  a:\n    script: [make]\n'));
  const hook = await sendWebhook(stack, 'github', 'push', githubPush('acme/loopback', commit), {
    secret: created.secret,
  });
  assert.equal(hook.status, 202, hook.text);
  const view = await waitForJob(stack, hook.body.job_id);
  assert.equal(view.job.state, 'failed');
  assert.equal(
    view.job.error,
    `refused to call ${fake.url}/repos/acme/loopback/contents/.conductor.yml?ref=${commit}: 127.0.0.1 is not a public address (loopback, private or link-local); CONDUCTOR_ALLOW_PRIVATE_FORGES=1 allows it`,
  );
  assert.deepEqual(fake.requestsFor(commit), [], 'the forge was never asked');
});

test('a forge_url whose name resolves to a loopback address is refused after the lookup', async () => {
  const created = await createProject(stack, {
    id: 'named',
    name: 'named',
    forge: 'gitea',
    repo: 'acme/named',
    repo_url: 'https://gitea.example/acme/named.git',
    forge_url: `http://localhost:${port}`,
    forge_token: 'gitea-token',
  });
  const commit = sha('named');
  fake.setFile('acme/named', commit, pipeline('x', '  a:\n    script: [make]\n'));
  const hook = await sendWebhook(stack, 'gitea', 'push', giteaPush('acme/named', commit), {
    secret: created.secret,
  });
  const view = await waitForJob(stack, hook.body.job_id);
  assert.equal(view.job.state, 'failed');
  assert.match(
    view.job.error,
    /^refused to call http:\/\/localhost:\d+\/api\/v1\/repos\/acme\/named\/raw\/\.conductor\.yml\?ref=[0-9a-f]+: localhost resolves to (127\.0\.0\.1|::1), which is not a public address/,
  );
  assert.deepEqual(fake.requestsFor(commit), []);
});
