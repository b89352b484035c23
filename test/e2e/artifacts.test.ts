// Artifacts and caches through the real reference runner against the local
// stack and its directory store: what `build` makes reaches `deploy`, a
// second job restores the cache and skips the work, a restore key hits a
// prefix, a fork's job cannot overwrite main's cache, and an artifact over
// the limit fails its task naming the limit.
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { readFile, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { test } from 'node:test';
import { gunzipSync } from 'node:zlib';
import { runCtl } from '../../cli/ctl.ts';
import { purgeStorage, storeOf } from '../../lib/app/artifacts.ts';
import { transaction } from '../../lib/db/index.ts';
import { LocalStore } from '../../lib/storage/index.ts';
import { testStack } from '../helpers/stack.ts';
import { Fixture, tempDir } from '../runner/support.ts';

// A limit small enough to cross with a generated file.
const stack = await testStack(import.meta.filename, {
  CONDUCTOR_ARTIFACT_FILE_MAX_BYTES: String(64 * 1024),
});
const admin = { token: stack.adminToken };

function logOf(f: Fixture, jobId: string, name: string): Promise<string> {
  return f.task(jobId, name).then((t) => f.log(t.id));
}

/** A new commit on the fixture's repository, as a branch push would bring. */
function commit(f: Fixture, files: Record<string, string>): string {
  for (const [path, text] of Object.entries(files)) {
    execFileSync('mkdir', ['-p', join(f.repo.dir, path, '..')]);
    execFileSync('sh', ['-c', `cat > "$1"`, 'sh', join(f.repo.dir, path)], { input: text });
  }
  const git = (...args: string[]) =>
    execFileSync('git', ['-c', 'user.name=t', '-c', 'user.email=t@t', ...args], { cwd: f.repo.dir })
      .toString()
      .trim();
  git('add', '.');
  git('commit', '-q', '-m', 'more');
  return git('rev-parse', 'HEAD');
}

async function run(f: Fixture, sha: string): Promise<string> {
  const started = await stack.call('POST', `/v1/projects/${f.project}/jobs`, {
    ...admin,
    body: { ref: 'main', sha },
  });
  assert.equal(started.status, 202, started.text);
  return started.body.job_id;
}

test("build's artifact reaches deploy under $CONDUCTOR_ARTIFACTS/build/, and downloads as the file itself", async () => {
  const f = await Fixture.create(
    stack,
    'art',
    `  build:
    script:
      - mkdir -p dist && echo "built at $CONDUCTOR_SHA" > dist/app.txt
    artifacts:
      paths: ["dist/**"]
      expire_in: 7d
  deploy:
    needs: [build]
    script:
      - cat "$CONDUCTOR_ARTIFACTS/build/dist/app.txt"
`,
  );
  await f.runner();
  const jobId = await f.trigger();
  const view = await f.finished(jobId);
  assert.equal(view.job.state, 'success', JSON.stringify(view.tasks));
  assert.match(await logOf(f, jobId, 'deploy'), new RegExp(`built at ${f.repo.sha}`));

  const list = await stack.call('GET', `/v1/jobs/${jobId}/artifacts`, admin);
  assert.equal(list.status, 200, list.text);
  assert.equal(list.body.artifacts.length, 1);
  const artifact = list.body.artifacts[0];
  assert.equal(artifact.task_name, 'build');
  assert.equal(artifact.path, 'dist/app.txt');
  assert.equal(artifact.size, `built at ${f.repo.sha}\n`.length);
  const days = (Date.parse(artifact.expires_at) - Date.parse(artifact.created_at)) / 86_400_000;
  assert.ok(Math.abs(days - 7) < 0.01, `expires in ${days} days`);

  const redirect = await fetch(`${stack.url}/v1/artifacts/${artifact.id}`, {
    headers: { authorization: `Bearer ${stack.adminToken}` },
    redirect: 'manual',
  });
  assert.equal(redirect.status, 302);
  const location = redirect.headers.get('location')!;
  const file = await fetch(new URL(location, stack.url));
  assert.equal(file.status, 200);
  assert.match(file.headers.get('content-disposition') ?? '', /filename="app.txt"/);
  assert.equal(await file.text(), `built at ${f.repo.sha}\n`);

  // The signed URL is the only way in: tampered, or made for another object, it is refused.
  // The signature's first character (its last carries padding bits, and a
  // change there can decode to the same bytes).
  const at = location.lastIndexOf('.') + 1;
  const tampered = `${location.slice(0, at)}${location[at] === 'A' ? 'B' : 'A'}${location.slice(at + 1)}`;
  assert.equal((await fetch(new URL(tampered, stack.url))).status, 403);
  const unsigned = await stack.call('GET', `/v1/artifacts/${artifact.id}`);
  assert.equal(unsigned.status, 401);
});

test('a directory downloads as one tar.gz named after the task, and a matrix expansion keeps its own name', async () => {
  const f = await Fixture.create(
    stack,
    'tgz',
    `  pack:
    matrix:
      os: [linux]
    script:
      - mkdir -p out/sub && echo one > out/a.txt && echo two > out/sub/b.txt
    artifacts:
      paths: [out]
  use:
    needs: [pack]
    script:
      - 'cat "$CONDUCTOR_ARTIFACTS/pack (os: linux)/out/sub/b.txt"'
`,
  );
  await f.runner();
  const jobId = await f.trigger();
  const view = await f.finished(jobId);
  assert.equal(view.job.state, 'success', JSON.stringify(view.tasks));
  assert.match(await logOf(f, jobId, 'use'), /^two$/m);
  const list = await stack.call('GET', `/v1/jobs/${jobId}/artifacts`, admin);
  const artifact = list.body.artifacts[0];
  assert.equal(artifact.path, 'pack (os: linux).tar.gz');
  const redirect = await fetch(`${stack.url}/v1/artifacts/${artifact.id}`, {
    headers: { authorization: `Bearer ${stack.adminToken}` },
    redirect: 'manual',
  });
  const res = await fetch(new URL(redirect.headers.get('location')!, stack.url));
  assert.equal(res.headers.get('content-type'), 'application/gzip');
  const dir = await tempDir('conductor-tgz-');
  await writeFile(join(dir, 'a.tar.gz'), Buffer.from(await res.arrayBuffer()));
  // One archive: its entries are the files themselves, not another archive.
  const names = execFileSync('tar', ['-tzf', join(dir, 'a.tar.gz')])
    .toString()
    .trim()
    .split('\n');
  assert.deepEqual(names.sort(), ['out/a.txt', 'out/sub/b.txt']);
  assert.ok(gunzipSync(await readFile(join(dir, 'a.tar.gz'))).length > 0);
});

test('a second job with the same lock file restores the cache ("hit") and skips the work; a restore key hits a prefix', async () => {
  const f = await Fixture.create(
    stack,
    'cache',
    `  build:
    script:
      - if [ -f deps/installed ]; then echo "deps already there"; else echo "installing deps"; mkdir -p deps; echo v1 > deps/installed; fi
    cache:
      key: "deps-{{ hash 'lock.txt' }}"
      restore_keys: ["deps-"]
      paths: [deps]
`,
    { 'lock.txt': 'a@1\n' },
  );
  await f.runner();
  const first = await f.trigger();
  assert.equal((await f.finished(first)).job.state, 'success');
  const firstLog = await logOf(f, first, 'build');
  assert.match(firstLog, /cache miss: deps-[0-9a-f]{64}/);
  assert.match(firstLog, /^installing deps$/m);
  assert.match(firstLog, /cache saved: deps-/);

  const second = await run(f, f.repo.sha);
  assert.equal((await f.finished(second)).job.state, 'success');
  const secondLog = await logOf(f, second, 'build');
  assert.match(secondLog, /cache hit: deps-[0-9a-f]{64} \(\d+ bytes restored\)/);
  assert.match(secondLog, /deps already there/);
  assert.doesNotMatch(secondLog, /^installing deps$/m);

  // The lock file changes: its key misses, the restore key finds the older entry.
  const changed = commit(f, { 'lock.txt': 'a@2\n' });
  const third = await run(f, changed);
  assert.equal((await f.finished(third)).job.state, 'success');
  const thirdLog = await logOf(f, third, 'build');
  assert.match(thirdLog, /cache restored from restore key: deps-[0-9a-f]{64} for deps-/);
  assert.match(thirdLog, /deps already there/);
  assert.match(thirdLog, /cache saved: deps-/);

  const caches = await stack.call('GET', `/v1/projects/${f.project}/caches`, admin);
  assert.equal(caches.status, 200, caches.text);
  assert.equal(caches.body.caches.length, 2);
  for (const c of caches.body.caches) {
    assert.equal(c.scope, 'refs/heads/main');
    assert.ok(c.size > 0);
  }
  // The job page shows the restore's outcome with its bytes.
  const page = await fetch(`${stack.url}/jobs/${second}`, {
    headers: { cookie: await signedIn() },
  }).then((r) => r.text());
  assert.match(page, /cache hit/);

  const key = caches.body.caches[0].key as string;
  const deleted = await stack.call(
    'DELETE',
    `/v1/projects/${f.project}/caches/${encodeURIComponent(key)}`,
    admin,
  );
  assert.equal(deleted.status, 204, deleted.text);
  const again = await stack.call(
    'DELETE',
    `/v1/projects/${f.project}/caches/${encodeURIComponent(key)}`,
    admin,
  );
  assert.equal(again.status, 404);
  const after = await stack.call('GET', `/v1/projects/${f.project}/caches`, admin);
  assert.equal(after.body.caches.length, 1);
});

test('a cache entry replaced in the store after its save is not unpacked: the restore says it arrived damaged and the task goes on as after a miss', async () => {
  const f = await Fixture.create(
    stack,
    'cache-damaged',
    `  build:
    script:
      - cat deps/installed 2>/dev/null || true
      - if [ -f deps/installed ]; then echo "deps already there"; else echo "installing deps"; mkdir -p deps; echo v1 > deps/installed; fi
    cache:
      key: "deps-{{ hash 'lock.txt' }}"
      paths: [deps]
`,
    { 'lock.txt': 'a@1\n' },
  );
  await f.runner();
  const first = await f.trigger();
  assert.equal((await f.finished(first)).job.state, 'success');
  assert.match(await logOf(f, first, 'build'), /cache saved: deps-/);
  // Someone with write access to the bucket swaps the object for an archive
  // of their own (a deps/installed that says so).
  const { rows } = await stack.context.pool.query<{ storage_key: string }>(
    `select storage_key from caches where project_id = $1`,
    [f.project],
  );
  assert.equal(rows.length, 1);
  const store = storeOf(stack.context);
  assert.ok(store instanceof LocalStore);
  const forged = await tempDir('conductor-forged-cache-');
  execFileSync('mkdir', ['-p', join(forged, 'deps')]);
  await writeFile(join(forged, 'deps', 'installed'), 'forged\n');
  execFileSync('tar', [
    '-czf',
    join(store.root, ...rows[0]!.storage_key.split('/')),
    '-C',
    forged,
    'deps',
  ]);

  const second = await run(f, f.repo.sha);
  assert.equal((await f.finished(second)).job.state, 'success');
  const log = await logOf(f, second, 'build');
  assert.match(
    log,
    /cache deps-[0-9a-f]{64} could not be restored: the entry deps-[0-9a-f]{64} arrived damaged/,
  );
  assert.match(log, /^installing deps$/m);
  assert.doesNotMatch(log, /forged|cache hit/);
});

async function signedIn(): Promise<string> {
  const res = await fetch(`${stack.url}/login`, {
    method: 'POST',
    headers: { 'content-type': 'application/x-www-form-urlencoded' },
    body: `token=${encodeURIComponent(stack.adminToken)}`,
    redirect: 'manual',
  });
  const cookie = res.headers.get('set-cookie') ?? '';
  return cookie.split(';')[0]!;
}

test('an artifact over the per-file limit fails its task with an error naming the limit', async () => {
  const f = await Fixture.create(
    stack,
    'big',
    `  build:
    retries: 0
    script:
      - head -c 100000 /dev/zero > big.bin
    artifacts:
      paths: [big.bin]
`,
  );
  await f.runner();
  const jobId = await f.trigger();
  const view = await f.finished(jobId);
  assert.equal(view.job.state, 'failed');
  const task = view.tasks[0]!;
  assert.equal(task.state, 'failed');
  assert.equal(task.attempt, 1, 'a limit is not retried');
  assert.match(
    task.error ?? '',
    /artifact file "big.bin" is 100000 bytes \(97.7 KiB\); at most 65536 bytes \(64 KiB\) per file are allowed \(CONDUCTOR_ARTIFACT_FILE_MAX_BYTES\)/,
  );
  const list = await stack.call('GET', `/v1/jobs/${jobId}/artifacts`, admin);
  assert.deepEqual(list.body.artifacts, []);
});

test('retention purges an expired artifact: its row, its object, and its download answer 404', async () => {
  const f = await Fixture.create(
    stack,
    'expire',
    `  build:
    script:
      - echo gone-soon > out.txt
    artifacts:
      paths: [out.txt]
      expire_in: 1d
`,
  );
  await f.runner();
  const jobId = await f.trigger();
  assert.equal((await f.finished(jobId)).job.state, 'success');
  const [artifact] = (await stack.call('GET', `/v1/jobs/${jobId}/artifacts`, admin)).body.artifacts;
  const redirect = await fetch(`${stack.url}/v1/artifacts/${artifact.id}`, {
    headers: { authorization: `Bearer ${stack.adminToken}` },
    redirect: 'manual',
  });
  const location = redirect.headers.get('location')!;
  // A day passes.
  await transaction(stack.context.pool, (tx) =>
    tx.query(`update artifacts set expires_at = now() - interval '1 second' where id = $1`, [
      artifact.id,
    ]),
  );
  const purged = await purgeStorage(stack.context);
  assert.ok(purged.artifacts_purged >= 1);
  assert.deepEqual(
    (await stack.call('GET', `/v1/jobs/${jobId}/artifacts`, admin)).body.artifacts,
    [],
  );
  assert.equal((await stack.call('GET', `/v1/artifacts/${artifact.id}`, admin)).status, 404);
  // The URL handed out before is still signed, but the object is gone.
  assert.equal((await fetch(new URL(location, stack.url))).status, 404);
});

test("ctl lists a job's artifacts, downloads one as itself, lists caches and deletes one", async () => {
  const f = await Fixture.create(
    stack,
    'ctl',
    `  build:
    script:
      - mkdir -p c && echo v > c/v && echo "report" > report.txt
    artifacts:
      paths: [report.txt]
    cache:
      key: ctl-key
      paths: [c]
`,
  );
  await f.runner();
  const jobId = await f.trigger();
  assert.equal((await f.finished(jobId)).job.state, 'success');
  const lines: string[] = [];
  const io = { out: (line: string) => lines.push(line), env: {} };
  const common = ['--url', stack.url, '--token', stack.adminToken];
  assert.equal(await runCtl(['artifacts', jobId, ...common], io), 0);
  const listed = lines.splice(0).join('\n');
  assert.match(listed, /^build\s+report\.txt\s+7 bytes\s+\S+\s+([0-9a-f-]{36})$/m);
  const id = /([0-9a-f-]{36})$/m.exec(listed)![1]!;
  const dir = await tempDir('conductor-ctl-download-');
  const file = join(dir, 'got.txt');
  assert.equal(await runCtl(['download', id, '--file', file, ...common], io), 0);
  assert.equal(await readFile(file, 'utf8'), 'report\n');
  assert.deepEqual(lines.splice(0), [`wrote ${file}`]);
  assert.equal(await runCtl(['caches', '--project', f.project, ...common], io), 0);
  assert.match(lines.join('\n'), /^ctl-key\s+refs\/heads\/main\s+\d+ bytes\s+\S+Z$/m);
  lines.splice(0);
  assert.equal(
    await runCtl(['cache', 'delete', '--project', f.project, '--name', 'ctl-key', ...common], io),
    0,
  );
  assert.deepEqual(lines, ['deleted cache ctl-key']);
  const after = await stack.call('GET', `/v1/projects/${f.project}/caches`, admin);
  assert.deepEqual(after.body.caches, []);
});

test('a failed-only rerun keeps build with its artifact: the rerun deploy receives it and the new job lists it', async () => {
  const marker = join(await tempDir('conductor-rerun-marker-'), 'failed-once');
  const f = await Fixture.create(
    stack,
    'rerun',
    `  build:
    script:
      - echo "from the first job" > out.txt
    artifacts:
      paths: [out.txt]
  deploy:
    needs: [build]
    retries: 0
    script:
      - if [ ! -f ${marker} ]; then touch ${marker}; exit 1; fi
      - cat "$CONDUCTOR_ARTIFACTS/build/out.txt"
`,
  );
  await f.runner();
  const first = await f.trigger();
  assert.equal((await f.finished(first)).job.state, 'failed');
  const rerun = await stack.call('POST', `/v1/jobs/${first}/rerun`, {
    ...admin,
    body: { failed_only: true },
  });
  assert.equal(rerun.status, 202, rerun.text);
  const second = rerun.body.job_id as string;
  const view = await f.finished(second);
  assert.equal(view.job.state, 'success', JSON.stringify(view.tasks));
  assert.match(await logOf(f, second, 'deploy'), /^from the first job$/m);
  const listed = await stack.call('GET', `/v1/jobs/${second}/artifacts`, admin);
  assert.deepEqual(
    listed.body.artifacts.map((a: { task_name: string; path: string }) => [a.task_name, a.path]),
    [['build', 'out.txt']],
  );
});
