// org_groups through the API and a real compile (issue #46): the admin sets
// which org: groups a project is in, and a push of a pipeline naming another
// fails with a pipeline error naming the group.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { assertBadRequest } from './assertions.ts';
import { pushToBranch, startE2E, waitForJob } from './calls.ts';
import { sha } from './payloads.ts';

const REPO = 'acme/org-groups';
const {
  fake,
  stack,
  projects: { project },
} = await startE2E(import.meta.filename, {
  projects: {
    project: {
      forge: 'github',
      id: 'org-groups',
      repo: REPO,
      cancel_superseded: false,
      org_groups: ['Prod-Deploy', 'prod-deploy', 'shared'],
    },
  },
});
const admin = { token: stack.adminToken };

test('org_groups is set on create and by PATCH, lower-cased, once each, and shown', async () => {
  assert.deepEqual(project.project.org_groups, ['prod-deploy', 'shared']);
  const patched = await stack.call('PATCH', '/v1/projects/org-groups', {
    ...admin,
    body: { org_groups: ['release'] },
  });
  assert.equal(patched.status, 200, patched.text);
  assert.deepEqual(patched.body.project.org_groups, ['release']);
  const got = await stack.call('GET', '/v1/projects/org-groups', admin);
  assert.deepEqual(got.body.project.org_groups, ['release']);
  for (const bad of [
    ['org:release'],
    [''],
    'release',
    Array.from({ length: 51 }, (_, i) => `g${i}`),
  ]) {
    const res = await stack.call('PATCH', '/v1/projects/org-groups', {
      ...admin,
      body: { org_groups: bad },
    });
    assertBadRequest(res, 'org_groups');
  }
  const nobody = await stack.call('PATCH', '/v1/projects/org-groups', { body: { org_groups: [] } });
  assert.equal(nobody.status, 401);
});

test('a push naming an org: group the project is not in fails, naming the group at its line', async () => {
  const commit = sha('org-group-push');
  fake.setFile(
    REPO,
    commit,
    'version: 1\ntasks:\n  deploy:\n    script: [x]\n    concurrency: { group: "org:prod-deploy", mode: cancel_running }\n',
  );
  const view = await waitForJob(
    stack,
    await pushToBranch(stack, { repo: REPO, secret: project.secret }, commit, 'main'),
  );
  assert.equal(view.job.state, 'failed');
  assert.equal(
    view.job.error,
    ".conductor.yml:5:27: tasks.deploy.concurrency.group: the project is not in the concurrency group org:prod-deploy (its org_groups: release); an admin adds it to the project's org_groups",
  );
});
