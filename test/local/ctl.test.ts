import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { PassThrough, Readable, Writable } from 'node:stream';
import { after, test } from 'node:test';
import { sealContext } from '../../lib/app/projects.ts';
import { decrypt } from '../../lib/secrets.ts';
import { type CtlIo, promptHidden, runCtl } from '../../local/ctl.ts';
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
  assert.match(worker.out, /"docker"/);

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
  assert.match(secrets.out, /"name": "TOKEN"/);
  assert.doesNotMatch(secrets.out, /value-from-stdin/);

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
  // The job's page, by the signed link: it opens without signing in.
  const page = /^page: (\S+)$/m.exec(shown)?.[1];
  assert.ok(page?.startsWith(`${stack.url}/jobs/${jobId}?sig=`), shown);
  const opened = await fetch(page!, { redirect: 'manual' });
  assert.equal(opened.status, 200);
  assert.match(await opened.text(), /data-job-state="running"/);

  const jobs = await ctl('jobs', '--project', 'cli');
  assert.match(jobs.out, new RegExp(`#1\\trunning\\tpush\\trefs/heads/main\\t${sha.slice(0, 12)}`));
});

test('the CLI signs with the secret it is given: a wrong one is refused', async () => {
  const push = await ctl('webhook', 'push', '--project', 'cli', '--secret', 'wrong', '--sha', sha);
  assert.equal(push.code, 1);
  assert.match(push.out, /^HTTP 401 /);
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
    assert.match(lines.join('\n'), /"id": "cli"/);
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
    /^--value is refused: npm prints its command line, so the value would show/,
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
  assert.equal(
    JSON.parse(moved.out.slice(0, moved.out.lastIndexOf('}') + 1)).project.has_forge_token,
    false,
  );
  assert.match(moved.out, /the stored forge token was dropped with the old forge URL/);
  assert.equal(
    JSON.parse(moved.out.slice(0, moved.out.lastIndexOf('}') + 1)).project.forge_url,
    'https://gitea.example',
  );
  // --drop-forge-url sends forge_url: null, back to the forge's public API.
  const back = await ctl('project', 'update', 'cli', '--drop-forge-url');
  assert.equal(back.code, 0, back.out);
  assert.equal(
    JSON.parse(back.out.slice(0, back.out.lastIndexOf('}') + 1)).project.forge_url,
    null,
  );
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
  );
  assert.equal(JSON.parse(again.out).project.has_forge_token, true);
  const dropped = await ctl('project', 'update', 'cli', '--drop-forge-token', '--enabled', 'true');
  assert.equal(dropped.code, 0, dropped.out);
  assert.equal(JSON.parse(dropped.out).project.has_forge_token, false);
  assert.equal(JSON.parse(dropped.out).project.enabled, true);

  const onTheLine = await ctl('project', 'update', 'cli', '--forge-token', 'ghp_secret');
  assert.equal(onTheLine.code, 2);
  assert.match(onTheLine.out, /^--forge-token is refused: npm prints its command line/);
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

test('ctl --help lists every command the CLI runs', async () => {
  const help = await ctl('--help');
  assert.equal(help.code, 0);
  const source = readFileSync(new URL('../../local/ctl.ts', import.meta.url), 'utf8');
  const commands = [...source.matchAll(/^ {6}case '([a-z ]+)':/gm)].map((m) => m[1]!);
  assert.ok(commands.length >= 17, commands.join(', '));
  for (const command of [...commands, 'validate']) {
    assert.match(help.out, new RegExp(`^  ${command}( |$)`, 'm'), `${command} is in --help`);
  }
  // And nothing it lists is unknown to it.
  const listed = [
    ...help.out.matchAll(
      /^ {2}([a-z]+(?: (?:create|update|show|revoke|set|push|approve|delete))?)(?= |$)/gm,
    ),
  ].map((m) => m[1]!);
  for (const command of listed) assert.ok([...commands, 'validate'].includes(command), command);
});

test('rerun and job without a JOB_ID are usage errors', async () => {
  assert.equal((await ctl('rerun')).code, 2);
  assert.equal((await ctl('job')).code, 2);
});
