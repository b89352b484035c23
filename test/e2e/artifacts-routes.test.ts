// The runner's artifact and cache routes, called as a runner would, with
// replies lost and requests repeated: each is lease-checked like heartbeat
// and complete, and a repeat answers the same artifact, entry and upload.
import assert from 'node:assert/strict';
import { createHash } from 'node:crypto';
import { test } from 'node:test';
import { testStack } from '../helpers/stack.ts';
import { Fixture } from '../runner/support.ts';
import { claimTask } from './calls.ts';

const stack = await testStack(import.meta.filename, {
  CONDUCTOR_ARTIFACT_TASK_MAX_BYTES: '1000',
  CONDUCTOR_ARTIFACT_PROJECT_MAX_BYTES: '1500',
  CONDUCTOR_CACHE_QUOTA_BYTES: '100',
});

const sha256 = (text: string) => createHash('sha256').update(text).digest('hex');

async function claimed(label: string) {
  const f = await Fixture.create(
    stack,
    label,
    `  build:
    script: [make]
    artifacts:
      paths: [out]
    cache:
      key: k
      paths: [c]
`,
  );
  await f.trigger();
  const task = await claimTask(stack, f.token);
  const post = (path: string, body: Record<string, unknown>, token = f.token) =>
    stack.call('POST', `/v1/runner/tasks/${task.id}/${path}`, {
      token,
      body: { lease_id: task.lease_id, ...body },
    });
  return { f, task, post };
}

test('a repeated upload request answers the same artifact and URL; the commit checks the bytes and repeats alike', async () => {
  const { post } = await claimed('repeat');
  const body = { path: 'out.txt', kind: 'file', size: 5, sha256: sha256('hello') };
  const first = await post('artifacts', body);
  assert.equal(first.status, 200, first.text);
  const again = await post('artifacts', body);
  assert.equal(again.status, 200, again.text);
  assert.equal(again.body.artifact.id, first.body.artifact.id);
  assert.equal(again.body.upload.parts.length, 1);

  const other = await post('artifacts', { ...body, size: 6, sha256: sha256('hello!') });
  assert.equal(other.status, 409, 'the same path with other bytes');

  const early = await post(`artifacts/${first.body.artifact.id}/commit`, {});
  assert.equal(early.status, 409);
  assert.match(early.body.error.message, /was not uploaded/);

  const put = await fetch(new URL(first.body.upload.parts[0].url, stack.url), {
    method: 'PUT',
    body: 'hello',
  });
  assert.equal(put.status, 200);
  const commit = await post(`artifacts/${first.body.artifact.id}/commit`, {});
  assert.equal(commit.status, 200, commit.text);
  const repeat = await post(`artifacts/${first.body.artifact.id}/commit`, {});
  assert.equal(repeat.status, 200);
  assert.deepEqual(repeat.body, commit.body);
});

test('the per-task limit counts every artifact of the attempt, and answers 413 naming it', async () => {
  const { post } = await claimed('pertask');
  const one = await post('artifacts', { path: 'a', kind: 'file', size: 600, sha256: sha256('a') });
  assert.equal(one.status, 200, one.text);
  const two = await post('artifacts', { path: 'b', kind: 'file', size: 600, sha256: sha256('b') });
  assert.equal(two.status, 413);
  assert.match(
    two.body.error.message,
    /the task's artifacts reach 1200 bytes .*; at most 1000 bytes .* per task are allowed \(CONDUCTOR_ARTIFACT_TASK_MAX_BYTES\)/,
  );
});

test('a lease that is not the current one answers 409, another worker 409, no token 401, bad fields 400 naming them', async () => {
  const { task, post } = await claimed('lease');
  const body = { path: 'x', kind: 'file', size: 1, sha256: sha256('x') };
  const stale = await stack.call('POST', `/v1/runner/tasks/${task.id}/artifacts`, {
    token: (await Fixture.create(stack, 'other', '  t:\n    script: [x]\n')).token,
    body: { lease_id: task.lease_id, ...body },
  });
  assert.equal(stale.status, 409);
  const wrong = await post('artifacts', {
    ...body,
    lease_id: '00000000-0000-4000-8000-000000000000',
  });
  assert.equal(wrong.status, 409);
  const none = await stack.call('POST', `/v1/runner/tasks/${task.id}/artifacts`, {
    body: { lease_id: task.lease_id, ...body },
  });
  assert.equal(none.status, 401);
  const bad = await post('artifacts', { ...body, path: '../etc/passwd', sha256: 'nope' });
  assert.equal(bad.status, 400);
  assert.match(bad.body.error.message, /path: must not contain "\.\."/);
  assert.match(bad.body.error.message, /sha256: must be 64 lowercase hex digits/);
  const restore = await post('caches/restore', { key: 'k' });
  assert.equal(restore.status, 200);
  assert.deepEqual(restore.body, { result: 'miss', key: null, size: 0, sha256: null, url: null });
});

test('a repeated cache save answers the same entry; once committed, the key is not saved again', async () => {
  const { post } = await claimed('csave');
  const body = { key: 'k', size: 3, sha256: sha256('abc') };
  const first = await post('caches/save', body);
  assert.equal(first.status, 200, first.text);
  const again = await post('caches/save', body);
  assert.equal(again.body.cache_id, first.body.cache_id);
  await fetch(new URL(first.body.upload.parts[0].url, stack.url), { method: 'PUT', body: 'abc' });
  const commit = await post(`caches/${first.body.cache_id}/commit`, {});
  assert.equal(commit.status, 200, commit.text);
  assert.deepEqual(commit.body, { key: 'k', scope: 'refs/heads/main', size: 3 });
  const later = await post('caches/save', body);
  assert.match(later.body.skipped, /already exists in refs\/heads\/main/);
  const restore = await post('caches/restore', { key: 'k' });
  assert.equal(restore.body.result, 'hit');
  assert.equal(restore.body.size, 3);
  assert.equal(await (await fetch(new URL(restore.body.url, stack.url))).text(), 'abc');
});

test("an untrusted task's cache is not saved over trusted entries that hold the quota; one they outgrew meanwhile is evicted at its commit, not main's", async () => {
  const { f, task, post } = await claimed('cuntrusted');
  // The task stands for a fork's (its pool's claim is tested elsewhere).
  await stack.context.pool.query('update tasks set trusted = false where id = $1', [task.id]);
  const trusted = async (key: string, size: number) =>
    stack.context.pool.query(
      `insert into caches (project_id, scope, key, storage_key, size, sha256, trusted, state, task_id, attempt)
       values ($1, 'refs/heads/main', $2, $3, $4, $5, true, 'ready', gen_random_uuid(), 1)`,
      [f.project, key, `caches/${f.project}/${key}`, size, sha256(key)],
    );
  await trusted('main-a', 60);
  const refused = await post('caches/save', { key: 'big', size: 41, sha256: sha256('x') });
  assert.equal(refused.status, 200, refused.text);
  assert.equal(
    refused.body.skipped,
    "the project's cache quota (100 bytes) is held by trusted entries (60 bytes), which an untrusted job's save never evicts",
  );
  const body = { key: 'k', size: 3, sha256: sha256('abc') };
  const first = await post('caches/save', body);
  assert.equal(first.status, 200, first.text);
  assert.match(first.body.scope, /^untrusted:/);
  await fetch(new URL(first.body.upload.parts[0].url, stack.url), { method: 'PUT', body: 'abc' });
  // Between the save and its commit, main saved 39 bytes more: 102 > 100.
  await trusted('main-b', 39);
  const commit = await post(`caches/${first.body.cache_id}/commit`, {});
  assert.equal(commit.status, 200, commit.text);
  assert.equal(commit.body.evicted, true);
  const { rows } = await stack.context.pool.query<{ key: string }>(
    'select key from caches where project_id = $1 order by key',
    [f.project],
  );
  assert.deepEqual(
    rows.map((r) => r.key),
    ['main-a', 'main-b'],
  );
});

test("a restore falls back to the project's default branch as its webhooks said it, not main", async () => {
  const { f, post } = await claimed('cdefault');
  await stack.context.pool.query(
    `insert into caches (project_id, scope, key, storage_key, size, sha256, trusted, state, task_id, attempt)
     values ($1, 'refs/heads/develop', 'k', $2, 3, $3, true, 'ready', gen_random_uuid(), 1)`,
    [f.project, `caches/${f.project}/develop-k`, sha256('abc')],
  );
  assert.equal((await post('caches/restore', { key: 'k' })).body.result, 'miss');
  await stack.context.pool.query(`update projects set default_branch = 'develop' where id = $1`, [
    f.project,
  ]);
  const restore = await post('caches/restore', { key: 'k' });
  assert.equal(restore.body.result, 'hit');
  assert.equal(restore.body.sha256, sha256('abc'));
});

/** Waits until `n` sessions of this database wait for a lock. */
async function untilWaiting(n: number): Promise<void> {
  const deadline = Date.now() + 30_000;
  for (;;) {
    const { rows } = await stack.context.pool.query<{ n: number }>(
      `select count(*)::int as n from pg_stat_activity
        where datname = current_database() and wait_event_type = 'Lock'`,
    );
    if (rows[0]!.n >= n) return;
    assert.ok(Date.now() < deadline, `timed out waiting for ${n} lock waiter(s)`);
    await new Promise((r) => setTimeout(r, 5));
  }
}

for (const order of ['a first', 'b first'] as const) {
  test(`two tasks racing past the project's limit: exactly the one that takes the project's lock first uploads (${order})`, async () => {
    const f = await Fixture.create(
      stack,
      order === 'a first' ? 'racea' : 'raceb',
      `  a:
    script: [make]
    artifacts:
      paths: [out]
  b:
    script: [make]
    artifacts:
      paths: [out]
`,
    );
    await f.trigger();
    const tasks = [await claimTask(stack, f.token), await claimTask(stack, f.token)];
    const byName = Object.fromEntries(tasks.map((t) => [t.name, t]));
    const begin = (name: string) =>
      stack.call('POST', `/v1/runner/tasks/${byName[name].id}/artifacts`, {
        token: f.token,
        body: {
          lease_id: byName[name].lease_id,
          path: 'out',
          kind: 'file',
          size: 800,
          sha256: sha256(name),
        },
      });
    // The project's row held: both requests get as far as its lock, then
    // the one that waited first takes it.
    const client = await stack.context.pool.connect();
    await client.query('begin');
    await client.query('select 1 from projects where id = $1 for update', [f.project]);
    const [firstName, secondName] = order === 'a first' ? ['a', 'b'] : ['b', 'a'];
    let first: ReturnType<typeof begin>;
    let second: ReturnType<typeof begin>;
    try {
      first = begin(firstName);
      await untilWaiting(1);
      second = begin(secondName);
      await untilWaiting(2);
    } finally {
      await client.query('rollback');
      client.release();
    }
    const [won, lost] = [await first!, await second!];
    assert.equal(won.status, 200, won.text);
    assert.equal(lost.status, 413, lost.text);
    assert.match(
      lost.body.error.message,
      /the project's unexpired artifacts would reach 1600 bytes .*; at most 1500 bytes .* per project are allowed/,
    );
  });
}
