import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, test } from 'node:test';
import { runCtl } from '../../local/ctl.ts';
import { testStack } from '../helpers/stack.ts';

const stack = await testStack(import.meta.filename);
const repo = await mkdtemp(join(tmpdir(), 'conductor-ctl-repo-'));
after(() => rm(repo, { recursive: true, force: true }));

const git = (...args: string[]) =>
  execFileSync('git', ['-c', 'user.name=t', '-c', 'user.email=t@t', ...args], { cwd: repo })
    .toString()
    .trim();
git('init', '-q', '-b', 'main');
await writeFile(
  join(repo, '.conductor.yml'),
  'version: 1\ntasks:\n  build:\n    script: [make]\n  test:\n    needs: [build]\n    script: [make test]\n',
);
git('add', '.');
git('commit', '-q', '-m', 'pipeline');
const sha = git('rev-parse', 'HEAD');

async function ctl(...argv: string[]) {
  const lines: string[] = [];
  const code = await runCtl([...argv, '--url', stack.url, '--token', stack.adminToken], {
    out: (l) => lines.push(l),
    env: {},
  });
  return { code, out: lines.join('\n') };
}

test('the CLI creates a project, a worker and a secret, sends a signed push and shows the job', async () => {
  const project = await ctl(
    'project',
    'create',
    '--id',
    'cli',
    '--repo',
    'acme/cli',
    '--repo-url',
    repo,
  );
  assert.equal(project.code, 0, project.out);
  const secret = /webhook secret \(shown once\): (\S+)/.exec(project.out)?.[1];
  assert.ok(secret, 'the webhook secret is printed');

  const worker = await ctl('worker', 'create', '--name', 'laptop', '--labels', 'linux,docker');
  assert.equal(worker.code, 0, worker.out);
  assert.match(worker.out, /worker token \(shown once\): cw_\S+/);
  assert.match(worker.out, /"docker"/);

  assert.equal(
    (await ctl('secret', 'set', '--project', 'cli', '--name', 'TOKEN', '--value', 'v')).code,
    0,
  );
  const secrets = await ctl('secrets', '--project', 'cli');
  assert.match(secrets.out, /"name": "TOKEN"/);
  assert.doesNotMatch(secrets.out, /"v"/);

  const push = await ctl('webhook', 'push', '--project', 'cli', '--secret', secret, '--sha', sha);
  assert.equal(push.code, 0, push.out);
  assert.match(push.out, /^HTTP 202 /);
  const jobId = JSON.parse(push.out.replace(/^HTTP 202 /, '')).job_id as string;

  // The compile runs in-process after the webhook answered.
  let shown = '';
  for (let i = 0; i < 100; i++) {
    shown = (await ctl('job', jobId)).out;
    if (!shown.includes(' pending ')) break;
    await new Promise((r) => setTimeout(r, 50));
  }
  assert.match(shown, /job #1 running \(push refs\/heads\/main /);
  assert.match(shown, /queued\s+build/);
  assert.match(shown, /waiting\s+test/);

  const jobs = await ctl('jobs', '--project', 'cli');
  assert.match(jobs.out, new RegExp(`#1\\trunning\\tpush\\trefs/heads/main\\t${sha.slice(0, 12)}`));
});

test('the CLI signs with the secret it is given: a wrong one is refused', async () => {
  const push = await ctl('webhook', 'push', '--project', 'cli', '--secret', 'wrong', '--sha', sha);
  assert.equal(push.code, 1);
  assert.match(push.out, /^HTTP 401 /);
});

test('the CLI explains its usage and failures', async () => {
  assert.equal((await ctl('nonsense')).code, 2);
  assert.equal((await ctl('project', 'create', '--id', 'x')).code, 2);
  assert.equal((await ctl('--bogus-flag')).code, 2);
  const missing = await ctl('job', '00000000-0000-4000-8000-000000000000');
  assert.equal(missing.code, 1);
  assert.match(missing.out, /HTTP 404/);
});

test('the CLI registers a worker scoped to projects or ephemeral, says when one may claim every project, and revokes it', async () => {
  const scoped = await ctl('worker', 'create', '--name', 'scoped', '--projects', 'cli');
  assert.equal(scoped.code, 0, scoped.out);
  assert.match(scoped.out, /"projects": \[\s*"cli"\s*\]/);
  assert.doesNotMatch(scoped.out, /every project/);
  const wide = await ctl('worker', 'create', '--name', 'wide');
  assert.match(wide.out, /"projects": "\*"/);
  assert.match(wide.out, /may claim tasks of every project; --projects a,b scopes it/);
  const all = await ctl('worker', 'create', '--name', 'all', '--all-projects', '--ephemeral');
  assert.match(all.out, /"ephemeral": true/);
  assert.doesNotMatch(all.out, /every project;/);
  const both = await ctl('worker', 'create', '--name', 'x', '--projects', 'cli', '--all-projects');
  assert.equal(both.code, 2);
  const unknown = await ctl('worker', 'create', '--name', 'x', '--projects', 'nope');
  assert.equal(unknown.code, 1);
  assert.match(unknown.out, /project "nope" does not exist/);

  const id = /"id": "([0-9a-f-]{36})"/.exec(scoped.out)![1]!;
  const revoked = await ctl('worker', 'revoke', id);
  assert.equal(revoked.code, 0, revoked.out);
  const listed = await ctl('workers');
  assert.match(listed.out, new RegExp(`"id": "${id}"[\\s\\S]*?"revoked": true`));
});
