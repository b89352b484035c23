// The statuses a forge receives for each kind of job, in order, through the
// local stack: a signed push, the in-process compile, a runner on the HTTP
// routes, the cancel route and the sweep. The GitHub and Gitea files run these
// with their own forge; the GitHub one with CONDUCTOR_PUBLIC_URL set.
//
// About the creation status: creating a job writes `pending: waiting for the
// pipeline to be read` held back 5 s. The in-process compile starts the job
// within milliseconds and writes `pending: running N tasks` in the same
// transaction that starts it; its delivery finds both rows open, marks the
// older one superseded, and posts only the newer. So the forge never sees the
// creation status here: the tests assert the exact posts, check the creation
// row is `superseded` (final, so it can never be posted later), and end with a
// sweep that posts nothing more and leaves no row open.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { runSweep } from '../../lib/app/sweep.ts';
import { verifyJobLink } from '../../lib/pages/access.ts';
import { claimTask, complete } from '../e2e/calls.ts';
import { type Forge, sha } from '../e2e/payloads.ts';
import type { FakeStatusForge, StatusPost } from '../helpers/fake-forge.ts';
import type { TestStack } from '../helpers/stack.ts';
import {
  adminCall,
  assertPost,
  makeProject,
  outbox,
  outboxIdle,
  pipelineFile,
  projectOn,
  push,
  pushSettled,
  runTasks,
  type StatusProject,
  seen,
  statusesSettled,
  TWO_TASKS,
} from './support.ts';

const THREE_TASKS = `  build:
    script: [make]
  test:
    needs: [build]
    script: [make test]
  lint:
    allow_failure: true
    script: [make lint]
`;

export function sequenceTests(
  forge: Forge,
  stack: TestStack,
  fake: FakeStatusForge,
  opts: { publicUrl?: string } = {},
): void {
  /** The post's target_url, checked: the job's page with a signed link that opens it. */
  const target = (jobId: string, post: StatusPost) => {
    if (!opts.publicUrl) return undefined;
    const page = `${opts.publicUrl.replace(/\/+$/, '')}/jobs/${jobId}?sig=`;
    const url = String(post.body.target_url);
    assert.ok(url.startsWith(page), `${url} is the job's page`);
    assert.ok(verifyJobLink(stack.context.keyring, jobId, url.slice(page.length)), url);
    return url;
  };

  /** After the sequence, a sweep finds nothing left to post for the commit. */
  async function nothingMore(commit: string, count: number, jobId: string) {
    const summary = await runSweep(stack.context);
    assert.equal(summary.statuses_delivered, 0, 'nothing was left for the sweep');
    assert.equal(fake.statusesFor(commit).length, count, 'the sweep posted nothing more');
    const open = (await outbox(stack, jobId)).filter((r) => r.result === null);
    assert.deepEqual(open, [], 'no outbox row is left open');
  }

  /**
   * Checks that the posts on `commit` so far are `expected` (`state: description`
   * each, in order) and that each is a whole post for the project (see
   * assertPost) with `context` and the link to `jobId`; answers the posts.
   */
  function assertPosts(
    p: StatusProject,
    commit: string,
    jobId: string,
    context: string,
    expected: string[],
  ): StatusPost[] {
    const posts = fake.statusesFor(commit);
    assert.deepEqual(seen(posts), expected);
    for (const [i, post] of posts.entries()) {
      const [state, ...rest] = expected[i]!.split(': ');
      const description = rest.join(': ');
      assertPost(post, p, commit, {
        state: state!,
        context,
        description,
        targetUrl: target(jobId, post),
      });
    }
    return posts;
  }

  test(`${forge}: a successful job shows pending "running 3 tasks", then success "2 passed, 1 allowed to fail", as conductor/<name>`, async () => {
    const p = await makeProject(stack, fake, forge, `${forge}-green`, {
      // A forge_url with a trailing slash still gives one slash before /api/v1.
      ...(forge === 'gitea' ? { forgeUrl: `${fake.url}/` } : {}),
    });
    const commit = sha(`${forge}-green`);
    fake.setFile(p.repo, commit, pipelineFile(p.label, THREE_TASKS, 'backend'));

    const { jobId } = await pushSettled(stack, fake, p, commit);
    const [running] = assertPosts(p, commit, jobId, 'conductor/backend', [
      'pending: running 3 tasks',
    ]);
    assert.equal(running!.answered, 201);
    // The creation status was superseded by the start, never posted.
    assert.deepEqual(
      (await outbox(stack, jobId)).map((r) => [r.state, r.description, r.result]),
      [
        ['pending', 'waiting for the pipeline to be read', 'superseded'],
        ['pending', 'running 3 tasks', 'delivered'],
      ],
    );

    const reported = await runTasks(stack, p, { lint: 'failed' });
    assert.equal(reported.at(-1), 'success');
    assertPosts(p, commit, jobId, 'conductor/backend', [
      'pending: running 3 tasks',
      'success: 2 passed, 1 allowed to fail',
    ]);
    await nothingMore(commit, 2, jobId);
  });

  test(`${forge}: a failed job shows pending, then failure "0 passed, 1 failed, 1 skipped", as plain conductor without a pipeline name`, async () => {
    const { p, commit } = await projectOn(stack, fake, forge, `${forge}-red`, TWO_TASKS);
    const { jobId } = await pushSettled(stack, fake, p, commit);
    const reported = await runTasks(stack, p, { build: 'failed' });
    assert.deepEqual(reported, ['failed'], 'the failed build settles the job; test is skipped');

    // The summary always starts with the passed count, even when it is 0.
    assertPosts(p, commit, jobId, 'conductor', [
      'pending: running 2 tasks',
      'failure: 0 passed, 1 failed, 1 skipped',
    ]);
    await nothingMore(commit, 2, jobId);
  });

  test(`${forge}: a job cancelled through the API shows pending, then error "cancelled: …", and nothing after the runner stops`, async () => {
    const { p, commit } = await projectOn(stack, fake, forge, `${forge}-stop`, TWO_TASKS, 'deploy');
    const { jobId } = await pushSettled(stack, fake, p, commit);
    const build = await claimTask(stack, p.runner);

    const cancel = await adminCall(stack, 'POST', `/v1/jobs/${jobId}/cancel`, 200);
    assert.equal(cancel.body.job.state, 'cancelled');
    // Posted before the route answered.
    assertPosts(p, commit, jobId, 'conductor/deploy', [
      'pending: running 2 tasks',
      'error: cancelled: cancelled through the API',
    ]);

    // The runner hears of the cancel and reports it; the job does not change again.
    const stopped = await complete(stack, p.runner, build.id, {
      lease_id: build.lease_id,
      outcome: 'cancelled',
    });
    assert.equal(stopped.status, 200, stopped.text);
    assert.equal(stopped.body.job_state, null);
    await nothingMore(commit, 2, jobId);
  });

  test(`${forge}: a job superseded by a newer push shows error "cancelled: superseded by job #2" on its commit`, async () => {
    const p = await makeProject(stack, fake, forge, `${forge}-older`);
    const first = sha(`${forge}-older-1`);
    const second = sha(`${forge}-older-2`);
    fake.setFile(p.repo, first, pipelineFile(p.label, TWO_TASKS));
    fake.setFile(p.repo, second, pipelineFile(p.label, TWO_TASKS));

    const { jobId: firstJob } = await pushSettled(stack, fake, p, first, 'refs/heads/feature');
    const secondJob = await push(stack, p, second, 'refs/heads/feature');
    // The webhook posts the cancel before it answers; the new job's start follows its compile.
    assertPosts(p, first, firstJob, 'conductor', [
      'pending: running 2 tasks',
      'error: cancelled: superseded by job #2',
    ]);
    await statusesSettled(stack, fake, secondJob, second, 1);
    assertPosts(p, second, secondJob, 'conductor', ['pending: running 2 tasks']);
    await nothingMore(first, 2, firstJob);
    assert.equal(fake.statusesFor(second).length, 1);
  });

  test(`${forge}: a broken pipeline shows one error naming its errors, as plain conductor, and nothing before it`, async () => {
    const broken = `  build:
    scirpt: [make]
  test:
    needs: [biuld]
    script: [make test]
`;
    const { p, commit } = await projectOn(stack, fake, forge, `${forge}-broken`, broken, 'backend');
    const { jobId } = await pushSettled(stack, fake, p, commit);
    const description =
      'the pipeline has 3 errors: .conductor.yml:7:5: tasks.build: unknown key "scirpt" (did you mean "script"?)';
    // The job never started, so it has no pipeline name: the context is plain
    // `conductor` although the file says `name: backend`.
    assertPosts(p, commit, jobId, 'conductor', [`error: ${description}`]);
    assert.deepEqual(
      (await outboxIdle(stack, jobId)).map((r) => [r.state, r.result]),
      [
        ['pending', 'superseded'],
        ['error', 'delivered'],
      ],
    );
    await nothingMore(commit, 1, jobId);
  });

  test(`${forge}: a commit without a pipeline file shows error "no .conductor.yml at <sha>"; a long error is cut to 140 characters`, async () => {
    const p = await makeProject(stack, fake, forge, `${forge}-nofile`);
    const bare = sha(`${forge}-nofile`);
    const { jobId } = await pushSettled(stack, fake, p, bare);
    assertPosts(p, bare, jobId, 'conductor', [`error: no .conductor.yml at ${bare}`]);

    const long = sha(`${forge}-long`);
    fake.setFile(
      p.repo,
      long,
      pipelineFile(p.label, `  build:\n    needs: [${'x'.repeat(150)}]\n    script: [make]\n`),
    );
    const [cut] = (await pushSettled(stack, fake, p, long, 'refs/heads/long')).posts;
    assert.equal(cut!.body.state, 'error');
    assert.equal(cut!.body.description.length, 140);
    assert.ok(cut!.body.description.startsWith('the pipeline has 1 error: .conductor.yml:'));
    assert.ok(cut!.body.description.endsWith('…'));
    assert.equal(cut!.answered, 201);
  });
}
