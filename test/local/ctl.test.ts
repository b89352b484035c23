import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { PassThrough, Readable, Writable } from 'node:stream';
import { after, test } from 'node:test';
import { type CtlIo, promptHidden, runCtl } from '../../cli/ctl.ts';
import { buildProgram } from '../../cli/main.ts';
import { sealContext } from '../../lib/app/projects.ts';
import { decrypt } from '../../lib/secrets.ts';
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
  return ctlWith({}, ...argv);
}

/** The CLI with more of its io: what stdin holds, a terminal's prompt, the folder it runs in. */
async function ctlWith(io: Partial<CtlIo>, ...argv: string[]) {
  const lines: string[] = [];
  const code = await runCtl([...argv, '--url', stack.url, '--token', stack.adminToken], {
    out: (l) => lines.push(l),
    env: {},
    ...io,
  });
  return { code, out: lines.join('\n') };
}

const piped = (text: string) => ({ stdin: Readable.from([Buffer.from(text)]) });

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
  assert.match(
    secret,
    /^[0-9a-f]{48}$/,
    'hex: a secret never starts with a dash that a shell or the CLI reads as an option',
  );

  const worker = await ctl('worker', 'create', '--name', 'laptop', '--labels', 'linux,docker');
  assert.equal(worker.code, 0, worker.out);
  assert.match(worker.out, /worker token \(shown once\): cw_\S+/);
  assert.match(worker.out, /^laptop\s+docker,linux\s+trusted\s+\*/m);

  const set = await ctlWith(
    piped('value-from-stdin\n'),
    'secret',
    'set',
    '--project',
    'cli',
    '--name',
    'TOKEN',
  );
  assert.equal(set.code, 0, set.out);
  assert.equal(set.out, 'secret TOKEN set for cli');
  const secrets = await ctl('secrets', '--project', 'cli');
  assert.match(secrets.out, /^TOKEN\s/m);
  assert.doesNotMatch(secrets.out, /value-from-stdin/);

  const push = await ctl('webhook', 'push', '--project', 'cli', '--secret', secret, '--sha', sha);
  assert.equal(push.code, 0, push.out);
  assert.match(push.out, /^HTTP 202: started cli#1 \(([0-9a-f-]{36})\)$/m);
  assert.match(push.out, /^follow it: npm run ctl -- job cli#1$/m);
  const jobId = /started cli#1 \(([0-9a-f-]{36})\)/.exec(push.out)![1]!;

  // The compile runs in-process after the webhook answered.
  let shown = '';
  for (let i = 0; i < 100; i++) {
    shown = (await ctl('job', jobId)).out;
    if (!shown.includes(' pending ')) break;
    await new Promise((r) => setTimeout(r, 50));
  }
  assert.match(shown, /job cli#1 running \(push refs\/heads\/main /);
  assert.match(shown, /^build\s+queued\s+0\/3\s+[0-9a-f-]{36}/m);
  assert.match(shown, /^test\s+waiting\s+0\/3\s+[0-9a-f-]{36}/m);
  // The same job by its number.
  assert.equal((await ctl('job', 'cli#1')).out.split('\n')[0], shown.split('\n')[0]);
  assert.equal(
    (await ctl('job', '1', '--project', 'cli')).out.split('\n')[0],
    shown.split('\n')[0],
  );
  // The job's page, by the signed link: it opens without signing in.
  const page = /^page: (\S+)$/m.exec(shown)?.[1];
  assert.ok(page?.startsWith(`${stack.url}/jobs/${jobId}?sig=`), shown);
  const opened = await fetch(page!, { redirect: 'manual' });
  assert.equal(opened.status, 200);
  assert.match(await opened.text(), /data-job-state="running"/);

  const jobs = await ctl('jobs', '--project', 'cli');
  assert.match(
    jobs.out,
    new RegExp(`^cli#1\\s+running\\s+push\\s+refs/heads/main\\s+${sha.slice(0, 12)}\\s`, 'm'),
  );
});

test('the CLI signs with the secret it is given: a wrong one is refused', async () => {
  const push = await ctl('webhook', 'push', '--project', 'cli', '--secret', 'wrong', '--sha', sha);
  assert.equal(push.code, 1);
  assert.match(push.out, /^HTTP 401 /);
});

test('project create --github-app makes a project the GitHub App serves, and prints no webhook secret', async () => {
  const args = [
    'project',
    'create',
    '--id',
    'app-cli',
    '--repo',
    'acme/app-cli',
    '--repo-url',
    'https://github.com/acme/app-cli.git',
    '--github-app',
  ];
  const made = await ctl(...args);
  assert.equal(made.code, 0, made.out);
  assert.match(made.out, /^github_app\s+true$/m);
  assert.match(made.out, /Served by the GitHub App: install the app on acme\/app-cli at GitHub/);
  assert.doesNotMatch(made.out, /webhook secret|payload URL/);
  const project = await stack.call('GET', '/v1/projects/app-cli', { token: stack.adminToken });
  assert.equal(project.body.project.github_app, true);
  assert.equal(project.body.project.commit_statuses, 'on: check runs through the GitHub App');

  // --json prints the API's answer, which has no secret either.
  const again = await ctl(...args.map((a) => a.replace('app-cli', 'app-cli-json')), '--json');
  assert.equal(again.code, 0, again.out);
  const answer = JSON.parse(again.out);
  assert.equal(answer.project.github_app, true);
  assert.equal('webhook_secret' in answer, false);

  // Without the flag, a project has its own webhook and its secret is printed, as before.
  const own = await ctl(
    'project',
    'create',
    '--id',
    'own-hook',
    '--repo',
    'acme/own-hook',
    '--repo-url',
    'https://github.com/acme/own-hook.git',
  );
  assert.match(own.out, /^github_app\s+false$/m);
  assert.match(own.out, /webhook secret \(shown once\): [0-9a-f]{48}/);
});

test('the admin token and a webhook secret can come from files, off the command line', async () => {
  const dir = await mkdtemp(join(tmpdir(), 'conductor-ctl-files-'));
  try {
    await writeFile(join(dir, 'admin'), `${stack.adminToken}\n`);
    await writeFile(join(dir, 'wrong'), 'not-the-secret\n');
    const lines: string[] = [];
    const listed = await runCtl(['projects', '--url', stack.url, '--token-file', 'admin'], {
      out: (l) => lines.push(l),
      env: { INIT_CWD: dir },
      cwd: dir,
    });
    assert.equal(listed, 0, lines.join('\n'));
    assert.match(lines.join('\n'), /^cli\s+cli\s+github\s+acme\/cli/m);
    const push = await ctlWith(
      { cwd: dir },
      'webhook',
      'push',
      '--project',
      'cli',
      '--secret-file',
      'wrong',
      '--sha',
      sha,
    );
    assert.equal(push.code, 1);
    assert.match(push.out, /^HTTP 401 /, 'the file was read and its secret used');
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
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
  assert.match(scoped.out, /^scoped\s+trusted\s+cli\s/m);
  assert.doesNotMatch(scoped.out, /every project/);
  const wide = await ctl('worker', 'create', '--name', 'wide');
  assert.match(wide.out, /^wide\s+trusted\s+\*\s/m);
  assert.match(wide.out, /may claim tasks of every project; --projects a,b scopes it/);
  const all = await ctl('worker', 'create', '--name', 'all', '--all-projects', '--ephemeral');
  assert.doesNotMatch(all.out, /every project;/);
  const allJson = await ctl(
    'worker',
    'create',
    '--name',
    'all2',
    '--all-projects',
    '--ephemeral',
    '--json',
  );
  const { worker: made, token } = JSON.parse(allJson.out);
  assert.deepEqual([made.name, made.ephemeral, made.projects], ['all2', true, '*']);
  assert.match(token, /^cw_/);
  const both = await ctl('worker', 'create', '--name', 'x', '--projects', 'cli', '--all-projects');
  assert.equal(both.code, 2);
  const unknown = await ctl('worker', 'create', '--name', 'x', '--projects', 'nope');
  assert.equal(unknown.code, 1);
  assert.match(unknown.out, /project "nope" does not exist/);

  const id = /([0-9a-f-]{36})$/m.exec(scoped.out)![1]!;
  const revoked = await ctl('worker', 'revoke', id);
  assert.equal(revoked.code, 0, revoked.out);
  // By name too.
  assert.equal((await ctl('worker', 'revoke', 'wide')).code, 0);
  const listed = JSON.parse((await ctl('workers', '--json')).out);
  // biome-ignore lint/suspicious/noExplicitAny: the API's workers.
  const states = Object.fromEntries(listed.workers.map((w: any) => [w.name, w.revoked]));
  assert.deepEqual([states.scoped, states.wide, states.all], [true, true, false]);
  assert.match((await ctl('workers')).out, /^scoped\s.*\srevoked\s/m);
});

/** A project's secret as stored, opened with the stack's keyring. */
async function storedSecret(project: string, name: string): Promise<string | null> {
  const { rows } = await stack.context.pool.query<{ value_enc: string }>(
    'select value_enc from project_secrets where project_id = $1 and name = $2',
    [project, name],
  );
  return rows[0]
    ? decrypt(stack.context.keyring, rows[0].value_enc, sealContext.secret(project, name))
    : null;
}

test('secret set takes the value from stdin or --file, less one final line feed, and refuses --value and an empty value, saying why', async () => {
  const refused = await ctl(
    'secret',
    'set',
    '--project',
    'cli',
    '--name',
    'ECHOED',
    '--value',
    'x',
  );
  assert.equal(refused.code, 2);
  assert.match(
    refused.out,
    /^--value is refused: the command line is seen \(npm prints it, the shell keeps it in its history/,
  );
  assert.match(refused.out, /printf %s "\$VALUE" \| npm run ctl -- secret set/);
  assert.equal(await storedSecret('cli', 'ECHOED'), null);

  const empty = await ctlWith(piped('\n'), 'secret', 'set', '--project', 'cli', '--name', 'EMPTY');
  assert.equal(empty.code, 2);
  assert.equal(empty.out, 'the value of EMPTY is empty: nothing was set');
  assert.equal(await storedSecret('cli', 'EMPTY'), null);

  // Only one line feed goes: a value may end in white space of its own.
  const multi = await ctlWith(
    piped('line one\nline two \n\n'),
    'secret',
    'set',
    '--project',
    'cli',
    '--name',
    'MULTI',
  );
  assert.equal(multi.code, 0, multi.out);
  assert.equal(await storedSecret('cli', 'MULTI'), 'line one\nline two \n');

  // --file is relative to where the command was typed (npm's INIT_CWD).
  const dir = await mkdtemp(join(tmpdir(), 'conductor-ctl-file-'));
  after(() => rm(dir, { recursive: true, force: true }));
  await writeFile(join(dir, 'token.txt'), 'from-a-file\r\n');
  const fromFile = await ctlWith(
    { cwd: dir, ...piped('not this') },
    'secret',
    'set',
    '--project',
    'cli',
    '--name',
    'FILED',
    '--file',
    'token.txt',
  );
  assert.equal(fromFile.code, 0, fromFile.out);
  assert.equal(await storedSecret('cli', 'FILED'), 'from-a-file');
  const missing = await ctlWith(
    { cwd: dir },
    'secret',
    'set',
    '--project',
    'cli',
    '--name',
    'X',
    '--file',
    'nope.txt',
  );
  assert.equal(missing.code, 2);
  assert.match(missing.out, /^cannot read nope\.txt: ENOENT/);
});

test('secret set on a terminal asks for the value through the prompt, not stdin', async () => {
  const asked: string[] = [];
  const terminal = Object.assign(Readable.from([Buffer.from('typed-ahead\n')]), { isTTY: true });
  const set = await ctlWith(
    {
      stdin: terminal,
      prompt: async (question) => {
        asked.push(question);
        return 'typed-at-the-prompt';
      },
    },
    'secret',
    'set',
    '--project',
    'cli',
    '--name',
    'TYPED',
  );
  assert.equal(set.code, 0, set.out);
  assert.deepEqual(asked, ['the value of TYPED (not echoed): ']);
  assert.equal(await storedSecret('cli', 'TYPED'), 'typed-at-the-prompt');
});

test('the prompt puts the terminal in raw mode, echoes nothing typed, honours backspace and restores the terminal', async () => {
  const input = new PassThrough() as PassThrough & { setRawMode: (raw: boolean) => void };
  const modes: boolean[] = [];
  input.setRawMode = (raw) => void modes.push(raw);
  let shown = '';
  const output = new Writable({
    write(chunk, _encoding, done) {
      shown += String(chunk);
      done();
    },
  });
  const answer = promptHidden('token: ', input, output);
  input.write('hunter3');
  input.write('\u007f2\r');
  assert.equal(await answer, 'hunter2');
  assert.equal(shown, 'token: \n');
  assert.deepEqual(modes, [true, false]);

  const cancelled = new PassThrough() as PassThrough & { setRawMode: (raw: boolean) => void };
  cancelled.setRawMode = () => {};
  const gaveUp = promptHidden('token: ', cancelled, output);
  cancelled.write('abc\u0003');
  await assert.rejects(gaveUp, /cancelled: nothing was set/);
});

test('project update changes every PATCH field, reads the forge token from stdin or a file, and refuses it on the command line', async () => {
  const token = await ctlWith(
    piped('ghp_from_stdin\n'),
    'project',
    'update',
    'cli',
    '--name',
    'CLI project',
    '--repo-url',
    'https://github.com/acme/cli.git',
    '--forge-token-file',
    '-',
    '--enabled',
    'false',
    '--cancel-superseded',
    'false',
    '--fork-pull-requests',
    'run',
    '--bot-pull-requests',
    'trusted',
    '--visibility',
    'public',
    '--json',
  );
  assert.equal(token.code, 0, token.out);
  const { project } = JSON.parse(token.out);
  assert.deepEqual(
    [
      project.name,
      project.repo_url,
      project.has_forge_token,
      project.enabled,
      project.cancel_superseded,
      project.fork_pull_requests,
      project.bot_pull_requests,
      project.visibility,
    ],
    [
      'CLI project',
      'https://github.com/acme/cli.git',
      true,
      false,
      false,
      'run',
      'trusted',
      'public',
    ],
  );

  // A new forge URL drops the token unless it is given again, and ctl says so.
  const moved = await ctl('project', 'update', 'cli', '--forge-url', 'https://gitea.example');
  assert.equal(moved.code, 0, moved.out);
  assert.match(moved.out, /^has_forge_token\s+false$/m);
  assert.match(moved.out, /the stored forge token was dropped with the old forge URL/);
  assert.match(moved.out, /^forge_url\s+https:\/\/gitea\.example$/m);
  // --drop-forge-url sends forge_url: null, back to the forge's public API.
  const back = await ctl('project', 'update', 'cli', '--drop-forge-url', '--json');
  assert.equal(back.code, 0, back.out);
  assert.equal(JSON.parse(back.out).project.forge_url, null);
  const both = await ctl(
    'project',
    'update',
    'cli',
    '--forge-url',
    'https://x.example',
    '--drop-forge-url',
  );
  assert.equal(both.code, 2);
  assert.match(both.out, /^give --forge-url or --drop-forge-url, not both/);
  const again = await ctlWith(
    piped('second-token'),
    'project',
    'update',
    'cli',
    '--forge-token-file',
    '-',
    '--json',
  );
  assert.equal(JSON.parse(again.out).project.has_forge_token, true);
  const dropped = await ctl(
    'project',
    'update',
    'cli',
    '--drop-forge-token',
    '--enabled',
    'true',
    '--json',
  );
  assert.equal(dropped.code, 0, dropped.out);
  assert.equal(JSON.parse(dropped.out).project.has_forge_token, false);
  assert.equal(JSON.parse(dropped.out).project.enabled, true);

  const onTheLine = await ctl('project', 'update', 'cli', '--forge-token', 'ghp_secret');
  assert.equal(onTheLine.code, 2);
  assert.match(onTheLine.out, /^--forge-token is refused: the command line is seen/);
  const create = await ctl(
    'project',
    'create',
    '--id',
    'x2',
    '--repo',
    'a/b',
    '--repo-url',
    repo,
    '--forge-token',
    't',
  );
  assert.equal(create.code, 2);
  const badBool = await ctl('project', 'update', 'cli', '--enabled', 'maybe');
  assert.equal(badBool.code, 2);
  assert.match(badBool.out, /^--enabled takes true or false, not "maybe"/);
  const badValue = await ctl('project', 'update', 'cli', '--visibility', 'secret');
  assert.equal(badValue.code, 1);
  assert.match(badValue.out, /HTTP 400: .*visibility/);
});

test('--help lists every command, and each group its commands; an unknown one suggests the nearest', async () => {
  const program = buildProgram({ out: () => {}, env: {} });
  const help = await ctl('--help');
  assert.equal(help.code, 0);
  const top = program.commands.map((c) => c.name());
  assert.ok(top.length >= 25, top.join(', '));
  for (const name of top) assert.match(help.out, new RegExp(`^  ${name}( |$)`, 'm'), name);
  for (const group of program.commands.filter((c) => c.commands.length > 0)) {
    const listed = await ctl(group.name(), '--help');
    for (const sub of group.commands) {
      assert.match(
        listed.out,
        new RegExp(`^  ${sub.name()}( |$)`, 'm'),
        `${group.name()} ${sub.name()}`,
      );
    }
  }
  const typo = await ctl('jbos', '--project', 'cli');
  assert.equal(typo.code, 2);
  assert.match(typo.out, /unknown command 'jbos'\n\(Did you mean jobs\?\)/);
  assert.doesNotMatch(typo.out, /Commands:/, 'not the whole help');
});

test('rerun and job without a JOB_ID are usage errors', async () => {
  assert.equal((await ctl('rerun')).code, 2);
  assert.equal((await ctl('job')).code, 2);
});
