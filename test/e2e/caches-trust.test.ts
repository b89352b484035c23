// Cache scoping through the real reference runner: a fork's pull request
// (untrusted, on an untrusted runner) saves to an isolated scope and never
// overwrites main's entry; main's jobs never restore what a fork saved; a
// fork may read main's trusted entry. And the quota evicts entries unused
// for 7 days first, then the least recently used.
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { test } from 'node:test';
import { transaction } from '../../lib/db/index.ts';
import { githubPullRequest } from '../forge/fixtures/github.ts';
import { testStack } from '../helpers/stack.ts';
import { Fixture, fakeDocker } from '../runner/support.ts';
import { sendWebhook } from './calls.ts';

const stack = await testStack(import.meta.filename, { CONDUCTOR_CACHE_QUOTA_BYTES: '600' });
const admin = { token: stack.adminToken };

const PIPELINE = `  build:
    retries: 0
    script:
      - if [ -f deps/made-by ]; then echo "restored deps made by $(cat deps/made-by)"; else mkdir -p deps; echo "$CONDUCTOR_REF" > deps/made-by; echo "made deps"; fi
    cache:
      key: "deps-{{ hash 'lock.txt' }}"
      paths: [deps]
`;

async function buildLog(f: Fixture, jobId: string): Promise<string> {
  const view = await f.finished(jobId);
  assert.equal(view.job.state, 'success', JSON.stringify(view.tasks));
  return f.log(view.tasks[0]!.id);
}

test("a fork's pull request cannot overwrite main's cache entry, and main never restores what a fork saved", async () => {
  const f = await Fixture.create(stack, 'fork', PIPELINE, { 'lock.txt': 'left-pad@1\n' });
  const patched = await stack.call('PATCH', `/v1/projects/${f.project}`, {
    ...admin,
    body: { fork_pull_requests: 'run' },
  });
  assert.equal(patched.status, 200, patched.text);
  const { body: rotated } = await stack.call(
    'POST',
    `/v1/projects/${f.project}/webhook-secret`,
    admin,
  );
  const worker = await stack.call('POST', '/v1/workers', {
    ...admin,
    body: { name: 'fork-untrusted', labels: ['fork'], untrusted: true },
  });
  assert.equal(worker.status, 201, worker.text);
  const untrusted = new Fixture(stack, f.project, worker.body.token, f.repo);
  await untrusted.runner({ ...(await fakeDocker()), untrusted: true });
  await f.runner();

  const forkPullRequest = async (number: number, headSha = f.repo.sha) => {
    const payload = githubPullRequest('opened', {
      repo: `acme/${f.project}`,
      number,
      headSha,
      fromFork: true,
    });
    const res = await sendWebhook(stack, 'github', 'pull_request', payload, {
      secret: rotated.webhook_secret,
    });
    assert.equal(res.status, 202, res.text);
    return res.body.job_id as string;
  };

  // The fork goes first: nothing to restore; it saves into its own scope.
  const fork = await forkPullRequest(12);
  const forkLog = await buildLog(f, fork);
  const forkJob = await stack.call('GET', `/v1/jobs/${fork}`, admin);
  assert.equal(forkJob.body.job.trusted, false);
  assert.match(forkLog, /cache miss: deps-/);
  assert.match(forkLog, /cache saved: deps-\S+ \(\d+ bytes, 1 files\) in untrusted:/);

  // main does not restore it, and saves its own entry under the same key.
  const main = await f.trigger();
  const mainLog = await buildLog(f, main);
  assert.match(mainLog, /cache miss: deps-/);
  assert.match(mainLog, /^made deps$/m);
  assert.match(mainLog, /cache saved: deps-\S+ .* in refs\/heads\/main/);

  // Another fork pull request hits main's trusted entry (its base branch)
  // and cannot replace it: entries are immutable, and its writes are isolated.
  const second = await forkPullRequest(13);
  const secondLog = await buildLog(f, second);
  assert.match(secondLog, /cache hit: deps-/);
  assert.match(secondLog, /^restored deps made by refs\/heads\/main$/m);

  const again = await stack.call('POST', `/v1/projects/${f.project}/jobs`, {
    ...admin,
    body: { ref: 'main', sha: f.repo.sha },
  });
  const againLog = await buildLog(f, again.body.job_id);
  assert.match(againLog, /cache hit: deps-/);
  assert.match(againLog, /^restored deps made by refs\/heads\/main$/m);

  const caches = await stack.call('GET', `/v1/projects/${f.project}/caches`, admin);
  const scopes = caches.body.caches
    .map((c: { scope: string; trusted: boolean }) => [c.scope, c.trusted])
    .sort();
  assert.equal(scopes.length, 2);
  assert.deepEqual(scopes[0], ['refs/heads/main', true]);
  assert.match(scopes[1]![0], /^untrusted:/);
  assert.equal(scopes[1]![1], false);

  // Trusted entries hold the quota (600 bytes; main's entry aged by hand to
  // stand for a big one): a fork's new key is not saved, and main's entry
  // stays. A fork's save never evicts a trusted entry.
  await transaction(stack.context.pool, (tx) =>
    tx.query(`update caches set size = 590 where project_id = $1 and trusted`, [f.project]),
  );
  const changed = commitLock(f, 'left-pad@2\n');
  const third = await forkPullRequest(14, changed);
  const thirdLog = await buildLog(f, third);
  assert.match(thirdLog, /^made deps$/m);
  assert.match(
    thirdLog,
    /cache deps-\S+ not saved: the project's cache quota \(600 bytes\) is held by trusted entries \(590 bytes\), which an untrusted job's save never evicts/,
  );
  const kept = (await stack.call('GET', `/v1/projects/${f.project}/caches`, admin)).body.caches;
  assert.deepEqual(
    kept.map((c: { scope: string }) => c.scope).sort(),
    scopes.map((p: [string, boolean]) => p[0]),
  );
});

test('past the quota, entries unused for 7 days are evicted first, then the least recently used', async () => {
  const f = await Fixture.create(
    stack,
    'quota',
    `  build:
    script:
      - mkdir -p c && head -c 100 /dev/urandom > c/blob
    cache:
      key: "c-$KEY"
      paths: [c]
`.replace('$KEY', "{{ hash 'lock.txt' }}"),
    { 'lock.txt': '1' },
  );
  await f.runner();
  // Three entries of a few hundred bytes each under a 600-byte quota: the
  // rows are aged by hand to stand for days of use.
  const keys: string[] = [];
  for (const lock of ['1', '2', '3']) {
    const sha = commitLock(f, lock);
    const started = await stack.call('POST', `/v1/projects/${f.project}/jobs`, {
      ...admin,
      body: { ref: 'main', sha },
    });
    const view = await f.finished(started.body.job_id);
    assert.equal(view.job.state, 'success');
    const listed = await stack.call('GET', `/v1/projects/${f.project}/caches`, admin);
    keys.push(listed.body.caches[0].key);
    if (lock === '2') {
      // Entry 1 was used an hour ago (recent), entry 2 eight days ago (stale).
      await transaction(stack.context.pool, async (tx) => {
        await tx.query(
          `update caches set last_used_at = now() - interval '1 hour' where project_id = $1 and key = $2`,
          [f.project, keys[0]],
        );
        await tx.query(
          `update caches set last_used_at = now() - interval '8 days' where project_id = $1 and key = $2`,
          [f.project, keys[1]],
        );
      });
    }
  }
  const left = (await stack.call('GET', `/v1/projects/${f.project}/caches`, admin)).body.caches.map(
    (c: { key: string }) => c.key,
  );
  // The stale entry went although entry 1 is older by creation.
  assert.ok(left.includes(keys[2]), 'the new entry stays');
  assert.ok(!left.includes(keys[1]), 'the entry unused for 8 days is evicted');
  const total = (
    await stack.call('GET', `/v1/projects/${f.project}/caches`, admin)
  ).body.caches.reduce((n: number, c: { size: number }) => n + c.size, 0);
  assert.ok(total <= 600, `within the quota: ${total}`);
});

function commitLock(f: Fixture, text: string): string {
  execFileSync('sh', ['-c', 'printf %s "$1" > lock.txt', 'sh', text], { cwd: f.repo.dir });
  const git = (...args: string[]) =>
    execFileSync('git', ['-c', 'user.name=t', '-c', 'user.email=t@t', ...args], { cwd: f.repo.dir })
      .toString()
      .trim();
  git('commit', '-q', '--allow-empty', '-am', `lock ${text}`);
  return git('rev-parse', 'HEAD');
}
