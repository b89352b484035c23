// Path patterns a stranger writes cannot hang the control plane (issue #46).
// Before, `changes:` went to picomatch's backtracking expressions during the
// compile: `*(a)*(a)...b` against one name of thirty `a`s took 17 s, and
// GET /v1/health answered 503 behind it. Now an extglob is a pipeline error
// at its line, and any other pattern is matched in bounded steps.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { githubPush } from '../forge/fixtures/github.ts';
import { type Json, sendWebhook, startE2E, waitForJob } from './calls.ts';
import { sha } from './payloads.ts';

const REPO = 'acme/hostile';
const {
  fake,
  stack,
  projects: { project },
} = await startE2E(import.meta.filename, {
  projects: { project: { forge: 'github', id: 'hostile', repo: REPO, cancel_superseded: false } },
});

let pushes = 0;
/** Pushes a commit holding `pipelineText` whose payload lists `files` as changed; answers the job view and how long it took. */
async function pushWith(pipelineText: string, files: string[]) {
  const commit = sha(`hostile-${++pushes}`);
  fake.setFile(REPO, commit, pipelineText);
  const payload = {
    ...githubPush(REPO, commit, { ref: `refs/heads/h${pushes}`, before: sha(`before-${pushes}`) }),
    commits: [{ id: commit, message: 'm', added: files, removed: [], modified: [] }],
  };
  // The health route is asked while the compile runs: it must not wait behind it.
  const started = Date.now();
  const hook = await sendWebhook(stack, 'github', 'push', payload, { secret: project.secret });
  assert.equal(hook.status, 202, hook.text);
  const healthStarted = Date.now();
  const health = await stack.call('GET', '/v1/health');
  const healthMs = Date.now() - healthStarted;
  const view = await waitForJob(stack, hook.body.job_id);
  return { view, ms: Date.now() - started, health, healthMs };
}

// The first compile of a stack starts its compile worker; the timed ones come after.
await pushWith('version: 1\ntasks:\n  warm:\n    script: [x]\n', ['x']);

const states = (view: Record<string, Json>) =>
  Object.fromEntries(view.tasks.map((t: Json) => [t.name, t.state]));

test('an extglob in changes: is a pipeline error at its line, and the control plane stays up', async () => {
  const pattern = `${'*(a)'.repeat(10)}b`;
  const { view, ms, health, healthMs } = await pushWith(
    `version: 1\ntasks:\n  web:\n    script: [make]\n    changes: ["${pattern}"]\n`,
    ['a'.repeat(40)],
  );
  assert.equal(view.job.state, 'failed');
  assert.match(view.job.error, /^\.conductor\.yml:5:\d+: tasks\.web\.changes\[0\]: extglob syntax/);
  assert.equal(health.status, 200);
  assert.ok(healthMs < 2000, `health took ${healthMs} ms`);
  assert.ok(ms < 5000, `the compile took ${ms} ms`);
});

test('stars that made picomatch backtrack for minutes are decided at once against long names', async () => {
  const pattern = `${'*a'.repeat(31)}b`;
  const { view, ms, health, healthMs } = await pushWith(
    `version: 1\ntasks:\n  web:\n    script: [make]\n    changes: ["${pattern}", "**/${'*a'.repeat(30)}/x"]\n  lint:\n    script: [lint]\n`,
    ['a'.repeat(4000), `${'a'.repeat(200)}/`.repeat(15).slice(0, -1), 'a'.repeat(40)],
  );
  assert.deepEqual(states(view), { web: 'skipped', lint: 'queued' });
  assert.match(view.tasks[0].error, /^no changed file matches/);
  assert.equal(health.status, 200);
  assert.ok(healthMs < 2000, `health took ${healthMs} ms`);
  assert.ok(ms < 5000, `the compile took ${ms} ms`);
});

test('a changed path too long to match runs the task, as an unknown diff would', async () => {
  const { view } = await pushWith(
    'version: 1\ntasks:\n  web:\n    script: [make]\n    changes: ["src/**"]\n',
    [`docs/${'a'.repeat(5000)}`],
  );
  assert.deepEqual(states(view), { web: 'queued' });
});
