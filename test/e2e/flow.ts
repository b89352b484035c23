// The whole life of a push, as the forge, a runner and a person see it; the
// GitHub and Gitea flow files run it with their own forge.
import assert from 'node:assert/strict';
import { giteaPush } from '../forge/fixtures/gitea.ts';
import { githubPush } from '../forge/fixtures/github.ts';
import type { FakeForge } from '../helpers/fake-forge.ts';
import type { TestStack } from '../helpers/stack.ts';
import { assertJobShape, assertTaskShape, assertTaskViewShape } from './assertions.ts';
import {
  addProject,
  claim,
  claimTask,
  complete,
  createWorker,
  heartbeat,
  type Json,
  putSecret,
  sendWebhook,
  uploadLog,
  waitForJob,
} from './calls.ts';
import { type Forge, pipeline, sha } from './payloads.ts';

const SECRET_VALUE = 'hunter2-Ω-deploy-key';

export async function fullFlow(stack: TestStack, fake: FakeForge, forge: Forge): Promise<void> {
  const label = `${forge}-flow`;
  const repo = forge === 'github' ? 'northwind/ledger' : 'harbor/tidewatch';
  const repoUrl = `https://${forge}.example/${repo}.git`;
  const forgeToken = `${forge}-token-${sha('token').slice(0, 12)}`;

  // A person sets the project up.
  const { project, secret } = await addProject(stack, fake, {
    forge,
    id: `${forge}-flow`,
    name: `${forge} flow`,
    repo,
    repo_url: repoUrl,
    forge_token: forgeToken,
  });
  assert.equal(project.has_forge_token, true);
  assert.equal(project.enabled, true);
  const { token: runner } = await createWorker(stack, [label, 'linux']);
  await putSecret(stack, project.id, 'DEPLOY_KEY', SECRET_VALUE);

  const commit = sha(`${forge}-flow-commit`);
  fake.setFile(
    repo,
    commit,
    pipeline(
      label,
      `  build:
    script:
      - make build
      - echo "$DEPLOY_KEY" | wc -c
    env:
      MODE: ci
    secrets: [DEPLOY_KEY]
    outputs: [version]
  test:
    needs: [build]
    matrix:
      node: [20]
    script: [make test]
`,
    ),
  );

  // The forge delivers a signed push.
  const push = forge === 'github' ? githubPush(repo, commit) : giteaPush(repo, commit);
  const hook = await sendWebhook(stack, forge, 'push', push, { secret });
  assert.equal(hook.status, 202, hook.text);
  assert.equal(typeof hook.body.job_id, 'string');
  assert.equal(hook.body.number, 1);
  const jobId: string = hook.body.job_id;

  // The compile reads the pipeline file at that commit and starts the job.
  const started = await waitForJob(stack, jobId);
  assert.equal(started.job.state, 'running', JSON.stringify(started.job));

  const asked = fake.requestsFor(commit);
  assert.equal(asked.length, 1, 'the file is read once');
  const request = asked[0]!;
  assert.equal(request.method, 'GET');
  assert.equal(request.query.ref, commit);
  if (forge === 'github') {
    assert.equal(request.path, `/repos/${repo}/contents/.conductor.yml`);
    assert.equal(request.headers.authorization, `Bearer ${forgeToken}`);
    assert.match(String(request.headers.accept), /application\/vnd\.github\.raw/);
  } else {
    assert.equal(request.path, `/api/v1/repos/${repo}/raw/.conductor.yml`);
    assert.equal(request.headers.authorization, `token ${forgeToken}`);
  }

  // A runner claims the first task.
  const build = await claimTask(stack, runner);
  assertTaskShape(build);
  assert.equal(build.job_id, jobId);
  assert.equal(build.name, 'build');
  assert.equal(build.attempt, 1);
  assert.equal(build.max_attempts, 3, 'retries default to 2: three attempts');
  assert.equal(build.image, null);
  assert.deepEqual(build.script, ['make build', 'echo "$DEPLOY_KEY" | wc -c']);
  assert.deepEqual(build.env, { MODE: 'ci' });
  assert.deepEqual(build.secrets, { DEPLOY_KEY: SECRET_VALUE }, 'a trusted push gets its secrets');
  assert.deepEqual(build.matrix, {});
  assert.deepEqual(build.needs_outputs, {});
  assert.equal(build.timeout_s, 3600);
  assert.deepEqual(build.repo, {
    url: repoUrl,
    sha: commit,
    ref: 'refs/heads/main',
    token: forgeToken,
  });

  const running = await waitForJob(stack, jobId);
  assert.equal(running.tasks.find((t: Json) => t.name === 'build').state, 'running');

  const beat = await heartbeat(stack, runner, build.id, build.lease_id);
  assert.equal(beat.status, 200, beat.text);
  assert.equal(beat.body.cancel, false);
  assert.equal(typeof beat.body.lease_expires_at, 'string');

  // Logs: offsets count the UTF-8 bytes the runner sent.
  const chunks = ['$ make build\n', `key is ${SECRET_VALUE} (été ✓)\n`, 'done\n'];
  let size = 0;
  for (const [i, data] of chunks.entries()) {
    const sent = await uploadLog(stack, runner, build.id, {
      lease_id: build.lease_id,
      offset: size,
      data,
    });
    assert.equal(sent.status, 200, sent.text);
    size += Buffer.byteLength(data, 'utf8');
    assert.equal(sent.body.size, size);
    if (i === 0) {
      // The runner did not see the answer and sends the same chunk again.
      const again = await uploadLog(stack, runner, build.id, {
        lease_id: build.lease_id,
        offset: 0,
        data,
      });
      assert.equal(again.status, 200, again.text);
      assert.equal(again.body.size, size, 'a chunk at an offset already stored is not added');
    }
  }
  const gap = await uploadLog(stack, runner, build.id, {
    lease_id: build.lease_id,
    offset: size + 10,
    data: 'lost\n',
  });
  assert.equal(gap.status, 409, gap.text);
  assert.equal(gap.body.error.code, 'conflict');
  assert.equal(gap.body.size, size, 'the 409 carries the current size');

  const log = await stack.call('GET', `/v1/tasks/${build.id}/log`, { token: stack.adminToken });
  assert.equal(log.status, 200);
  assert.match(String(log.headers.get('content-type')), /^text\/plain/);
  assert.equal(log.text, chunks.join('').replaceAll(SECRET_VALUE, '***'));
  assert.ok(!log.text.includes(SECRET_VALUE), 'the secret value is masked');

  // Outputs go to the task that needs the producer.
  const done = await complete(stack, runner, build.id, {
    lease_id: build.lease_id,
    outcome: 'success',
    exit_code: 0,
    outputs: { version: '1.4.2' },
  });
  assert.equal(done.status, 200, done.text);
  assert.deepEqual(done.body, { state: 'success', job_state: null });

  const test = await claimTask(stack, runner, { labels: [label] });
  assertTaskShape(test);
  assert.equal(test.name, 'test (node: 20)');
  assert.deepEqual(test.matrix, { node: '20' });
  assert.deepEqual(test.needs_outputs, { build: { version: '1.4.2' } });
  assert.deepEqual(test.secrets, {}, 'a task gets only the secrets it lists');

  const last = await complete(stack, runner, test.id, {
    lease_id: test.lease_id,
    outcome: 'success',
    exit_code: 0,
  });
  assert.equal(last.status, 200, last.text);
  assert.deepEqual(last.body, { state: 'success', job_state: 'success' });

  // The same completion again answers the same state, and does not settle twice.
  const repeat = await complete(stack, runner, test.id, {
    lease_id: test.lease_id,
    outcome: 'success',
    exit_code: 0,
  });
  assert.equal(repeat.status, 200, repeat.text);
  assert.deepEqual(repeat.body, { state: 'success', job_state: null });

  // What a person sees.
  const view = await waitForJob(stack, jobId);
  assertJobShape(view.job);
  assert.equal(view.job.id, jobId);
  assert.equal(view.job.project_id, project.id);
  assert.equal(view.job.number, 1);
  assert.equal(view.job.state, 'success');
  assert.equal(view.job.trigger, 'push');
  assert.equal(view.job.ref, 'refs/heads/main');
  assert.equal(view.job.sha, commit);
  assert.equal(view.job.trusted, true);
  assert.equal(view.job.rerun_of, null);
  assert.equal(view.job.error, null);
  assert.equal(view.job.errors, null);
  assert.notEqual(view.job.started_at, null);
  assert.notEqual(view.job.finished_at, null);
  assert.equal(view.tasks.length, 2);
  for (const task of view.tasks) assertTaskViewShape(task);
  const [buildView, testView] = view.tasks;
  assert.equal(buildView.name, 'build');
  assert.equal(buildView.base_name, 'build');
  assert.equal(buildView.state, 'success');
  assert.equal(buildView.exit_code, 0);
  assert.deepEqual(buildView.outputs, { version: '1.4.2' });
  assert.deepEqual(buildView.needs, []);
  assert.equal(testView.name, 'test (node: 20)');
  assert.equal(testView.base_name, 'test');
  assert.deepEqual(testView.matrix, { node: '20' });
  assert.deepEqual(testView.needs, ['build']);
  assert.equal(testView.attempt, 1);
  assert.equal(testView.allow_failure, false);
  assert.equal(JSON.stringify(view).includes(SECRET_VALUE), false);

  // A second push whose commit has no pipeline file fails at once and has no tasks.
  const bare = sha(`${forge}-flow-bare`);
  const second = await sendWebhook(
    stack,
    forge,
    'push',
    forge === 'github'
      ? githubPush(repo, bare, { ref: 'refs/heads/docs' })
      : giteaPush(repo, bare, { ref: 'refs/heads/docs' }),
    { secret },
  );
  assert.equal(second.status, 202, second.text);
  assert.equal(second.body.number, 2);
  const failed = await waitForJob(stack, second.body.job_id);
  assert.equal(failed.job.state, 'failed');

  const list = await stack.call('GET', `/v1/projects/${project.id}/jobs`, {
    token: stack.adminToken,
  });
  assert.equal(list.status, 200, list.text);
  assert.deepEqual(
    list.body.jobs.map((j: Json) => j.number),
    [2, 1],
    'newest first',
  );
  for (const job of list.body.jobs) assertJobShape(job);
  assert.equal(list.body.jobs[1].id, jobId);

  // Nothing is left to run.
  const empty = await claim(stack, runner);
  assert.equal(empty.status, 204);
  assert.equal(empty.text, '');
}
