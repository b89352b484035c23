// The CLI for schedules and runs with inputs (issue #29): `schedule create`,
// `schedules`, `schedule update`, `schedule delete`, and `trigger --input`
// without a sha, against the local stack.
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, test } from 'node:test';
import { runCtl } from '../../cli/ctl.ts';
import { createProject, waitForJob } from '../e2e/calls.ts';
import { testStack } from '../helpers/stack.ts';

const stack = await testStack(import.meta.filename);
const repo = await mkdtemp(join(tmpdir(), 'conductor-ctl-schedules-'));
after(() => rm(repo, { recursive: true, force: true }));
const git = (...args: string[]) =>
  execFileSync('git', ['-c', 'user.name=t', '-c', 'user.email=t@t', ...args], { cwd: repo })
    .toString()
    .trim();
git('init', '-q', '-b', 'main');
await writeFile(
  join(repo, '.conductor.yml'),
  // biome-ignore lint/suspicious/noTemplateCurlyInString: the pipeline's own ${{ inputs.x }} syntax
  'version: 1\ninputs:\n  env: {type: choice, options: [staging, prod], default: staging}\ntasks:\n  deploy:\n    script: ["./deploy ${{ inputs.env }}"]\n',
);
git('add', '.');
git('commit', '-q', '-m', 'pipeline');
await createProject(stack, {
  id: 'cli',
  name: 'cli',
  forge: 'github',
  repo: 'acme/cli',
  repo_url: repo,
});

async function ctl(...argv: string[]) {
  const lines: string[] = [];
  const code = await runCtl([...argv, '--url', stack.url, '--token', stack.adminToken], {
    out: (l) => lines.push(l),
    env: {},
  });
  return { code, text: lines.join('\n') };
}

test('schedule create, schedules, schedule update and schedule delete', async () => {
  const created = await ctl(
    'schedule',
    'create',
    '--project',
    'cli',
    '--name',
    'nightly',
    '--cron',
    '0 3 * * *',
    '--timezone',
    'Europe/Berlin',
    '--input',
    'env=prod',
    '--json',
  );
  assert.equal(created.code, 0, created.text);
  const schedule = JSON.parse(created.text).schedule;
  assert.equal(schedule.cron, '0 3 * * *');
  assert.deepEqual(schedule.inputs, { env: 'prod' });
  const listed = await ctl('schedules', '--project', 'cli');
  assert.match(
    listed.text,
    /^nightly\s+0 3 \* \* \*\s+Europe\/Berlin\s+\(default branch\)\s+\S+Z$/m,
  );
  const off = await ctl(
    'schedule',
    'update',
    '--project',
    'cli',
    '--name',
    'nightly',
    '--enabled',
    'false',
    '--json',
  );
  assert.equal(JSON.parse(off.text).schedule.enabled, false);
  assert.match((await ctl('schedules', '--project', 'cli')).text, /^nightly\s.*\sdisabled$/m);
  const bad = await ctl('schedule', 'create', '--project', 'cli', '--name', 'x', '--cron', '0 3 *');
  assert.equal(bad.code, 1);
  assert.match(bad.text, /HTTP 400: cron: must have 5 fields/);
  assert.equal((await ctl('schedule', 'delete', '--project', 'cli', '--name', 'nightly')).code, 0);
  assert.equal((await ctl('schedules', '--project', 'cli')).text, '');
});

test('trigger --input without a sha runs the head of the ref with the inputs', async () => {
  const res = await ctl('trigger', '--project', 'cli', '--ref', 'main', '--input', 'env=prod');
  assert.equal(res.code, 0, res.text);
  assert.match(
    res.text,
    /^started cli#\d+ \([0-9a-f-]{36}\)\nfollow it: npm run ctl -- job cli#\d+$/,
  );
  const view = await waitForJob(stack, /\(([0-9a-f-]{36})\)/.exec(res.text)![1]!);
  assert.equal(view.job.state, 'running', JSON.stringify(view.job));
  const { rows } = await stack.context.pool.query<{ script: string[] }>(
    'select script from tasks where job_id = $1',
    [view.job.id],
  );
  assert.deepEqual(rows[0]!.script, ['./deploy prod']);
  const bad = await ctl('trigger', '--project', 'cli', '--input', 'env');
  assert.equal(bad.code, 2);
  assert.match(bad.text, /--input env: expected NAME=VALUE/);
});
