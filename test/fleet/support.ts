// What the pool tests share: a project on a git repository whose pipeline
// runs `tasks` under one label, a pool serving it, and its push.
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { sendPush } from '../../local/push.ts';
import type { TestStack } from '../helpers/stack.ts';
import { gitRepo, waitFor } from '../runner/support.ts';

/** Creates the project (its id `label-xxxxxx`) and a pool of that name with `pool`'s fields; `push` answers the job's id. */
export async function poolProject(
  stack: TestStack,
  label: string,
  tasks: string,
  pool: Record<string, unknown>,
): Promise<{ id: string; push: () => Promise<string> }> {
  const admin = { token: stack.adminToken };
  const pipeline = `version: 1\ndefaults:\n  labels: [${label}]\ntasks:\n${tasks}`;
  const repo = await gitRepo({ '.conductor.yml': pipeline });
  const id = `${label}-${randomBytes(3).toString('hex')}`;
  const project = await stack.call('POST', '/v1/projects', {
    ...admin,
    body: { id, name: id, forge: 'github', repo: `acme/${id}`, repo_url: repo.dir },
  });
  assert.equal(project.status, 201, project.text);
  const created = await stack.call('POST', '/v1/pools', {
    ...admin,
    body: { name: id, labels: [label], projects: [id], ...pool },
  });
  assert.equal(created.status, 201, created.text);
  const push = async () => {
    const sent = await sendPush({
      url: stack.url,
      forge: 'github',
      repo: `acme/${id}`,
      repoUrl: repo.dir,
      sha: repo.sha,
      ref: 'refs/heads/main',
      secret: project.body.webhook_secret,
    });
    assert.equal(sent.status, 202, sent.text);
    return waitFor('the job', async () => {
      const jobs = await stack.call('GET', `/v1/projects/${id}/jobs`, admin);
      return jobs.body.jobs[0]?.id as string | undefined;
    });
  };
  return { id, push };
}
