// The runner image, checked without a Docker engine: Dockerfile.runner read
// as the builder reads it, against what `npm run build-runner` writes. It
// must copy that bundle, run it with Node 20 or later as an unprivileged user
// under an init, have git, and be built from a context that holds nothing
// else (Dockerfile.runner.dockerignore).
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { join, posix } from 'node:path';
import { test } from 'node:test';
import { RUNNER_BUNDLE } from '../../scripts/build-runner.ts';

const ROOT = join(import.meta.dirname, '..', '..');

interface Instruction {
  keyword: string;
  args: string;
}

/** The Dockerfile's instructions: comments dropped, `\` continuations joined. */
function instructions(text: string): Instruction[] {
  const out: Instruction[] = [];
  let pending = '';
  for (const raw of text.split('\n')) {
    const line = raw.trim();
    if (!pending && (line === '' || line.startsWith('#'))) continue;
    if (pending && line.startsWith('#')) continue; // A comment inside a continued instruction.
    pending += `${pending ? ' ' : ''}${line.replace(/\\$/, '').trim()}`;
    if (line.endsWith('\\')) continue;
    const [, keyword, args] = /^(\S+)\s*(.*)$/.exec(pending)!;
    out.push({ keyword: keyword!.toUpperCase(), args: args! });
    pending = '';
  }
  assert.equal(pending, '', 'the Dockerfile ends inside a continued instruction');
  return out;
}

const dockerfile = instructions(readFileSync(join(ROOT, 'Dockerfile.runner'), 'utf8'));
const all = (keyword: string) => dockerfile.filter((i) => i.keyword === keyword);
const one = (keyword: string) => {
  const found = all(keyword);
  assert.equal(found.length, 1, `one ${keyword}: ${JSON.stringify(found)}`);
  return found[0]!;
};

test('the parser reads continuations and comments as the builder does', () => {
  assert.deepEqual(instructions('# c\nFROM a\nRUN x \\\n  # note\n  && y\n\nUSER u\n'), [
    { keyword: 'FROM', args: 'a' },
    { keyword: 'RUN', args: 'x && y' },
    { keyword: 'USER', args: 'u' },
  ]);
});

test('the image is Node 20 or later with git, from one stage', () => {
  const from = one('FROM').args;
  const major = /^node:(\d+)(?:[.-]|$)/.exec(from);
  assert.ok(major, `FROM ${from} is not an official node image`);
  assert.ok(Number(major[1]) >= 20, `FROM ${from}: the runner needs Node 20 or later`);
  const installs = all('RUN')
    .map((r) => /apt-get install\b([^&;|]*)/.exec(r.args)?.[1] ?? '')
    .join(' ')
    .split(/\s+/);
  for (const pkg of ['git', 'ca-certificates', 'tini']) {
    assert.ok(installs.includes(pkg), `${pkg} is installed: ${installs.join(' ')}`);
  }
});

test('the image copies the bundle the build writes and runs it, under tini, as an unprivileged user it makes', () => {
  const copy = one('COPY').args.split(/\s+/);
  assert.equal(copy.length, 2, `COPY ${copy.join(' ')}: one source, one destination`);
  const [source, destination] = copy as [string, string];
  assert.equal(source, RUNNER_BUNDLE, 'COPY takes what npm run build-runner writes');
  assert.ok(posix.isAbsolute(destination), `COPY to ${destination}`);
  const installed = destination.endsWith('/')
    ? posix.join(destination, posix.basename(source))
    : destination;

  const entrypoint = one('ENTRYPOINT');
  const argv = JSON.parse(entrypoint.args) as string[];
  assert.ok(Array.isArray(argv), 'ENTRYPOINT in exec form: signals reach the process');
  assert.deepEqual(argv, ['/usr/bin/tini', '--', 'node', installed]);
  assert.equal(all('CMD').length, 0, "the runner's arguments are docker run's");

  // The user in force at ENTRYPOINT is the last USER before it.
  const at = dockerfile.indexOf(entrypoint);
  const user = dockerfile
    .slice(0, at)
    .filter((i) => i.keyword === 'USER')
    .at(-1)?.args;
  assert.ok(user, 'a USER before ENTRYPOINT: the image does not run as root');
  const [name] = user.split(':') as [string];
  assert.ok(!['root', '0'].includes(name), `USER ${user} is root`);
  const made = all('RUN').some((r) =>
    r.args
      .split('&&')
      .some((cmd) => /^\s*useradd\b/.test(cmd) && cmd.trim().split(/\s+/).at(-1) === name),
  );
  assert.ok(made, `a RUN useradd makes ${name}`);
  const uid = all('RUN')
    .flatMap((r) => r.args.split('&&'))
    .find((cmd) => /^\s*useradd\b/.test(cmd) && cmd.trim().split(/\s+/).at(-1) === name)
    ?.match(/--uid (\d+)/)?.[1];
  assert.ok(uid && Number(uid) >= 1000, `${name} has a fixed uid outside the system range`);
});

test('the build context holds the bundle alone', () => {
  const patterns = readFileSync(join(ROOT, 'Dockerfile.runner.dockerignore'), 'utf8')
    .split('\n')
    .map((l) => l.trim())
    .filter((l) => l && !l.startsWith('#'));
  assert.deepEqual(patterns, ['*', `!${RUNNER_BUNDLE}`]);
});
