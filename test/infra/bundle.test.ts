import assert from 'node:assert/strict';
import { spawn, spawnSync } from 'node:child_process';
import {
  chmodSync,
  existsSync,
  mkdtempSync,
  readdirSync,
  readFileSync,
  rmSync,
  writeFileSync,
} from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, test } from 'node:test';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { CHANNEL_HINTERS, STATUS_POSTERS } from '../../infra/stack.ts';
import { loadMigrationSet } from '../../lib/db/index.ts';
import { PAGE_ROUTES } from '../../lib/pages/index.ts';
import {
  type BundledFunction,
  bundleFunctions,
  byPackage,
  MIGRATIONS_HASH_FILE,
  SIZE_BUDGET,
} from '../../scripts/bundle.ts';

const KB = 1024;
const APP = fileURLToPath(new URL('../../infra/app.ts', import.meta.url));

// Bundled once for the whole file: the size checks, the loading checks and
// the synthesis below all use these.
const outdir = mkdtempSync(join(tmpdir(), 'conductor-dist-'));
after(() => rmSync(outdir, { recursive: true, force: true }));
const bundles = await bundleFunctions({ outdir });
const bundleOf = (name: BundledFunction) => bundles.find((b) => b.name === name)!;

test('every function fits its size budget', (t) => {
  for (const b of bundles) {
    const top = byPackage(b.coldInputs)
      .slice(0, 4)
      .map((p) => `${p.name} ${Math.round(p.bytes / KB)} KB`)
      .join(', ');
    t.diagnostic(
      `${b.name}: ${Math.round(b.bytes / KB)} KB at a cold start, ${Math.round(b.lazyBytes / KB)} KB later (${top})`,
    );
    assert.ok(
      b.bytes <= SIZE_BUDGET[b.name],
      `${b.name} is ${Math.round(b.bytes / KB)} KB, over its ${SIZE_BUDGET[b.name] / KB} KB: ${top}`,
    );
  }
});

// The cold import's time is checked by `npm run bundle-size` (its table, and
// exit 1 past a function's budget), which .ci/run runs after the suite, on a
// quiet machine: a time is a measure, never an assertion in a test (the
// suite runs files side by side), and it cost this file 80 s of node starts.

test('no cold start loads the AWS SDK', () => {
  // Every import of it is an import() at the call that needs it: its
  // modules are in chunks index.mjs does not import statically.
  for (const b of bundles) {
    assert.deepEqual(
      b.coldInputs.filter((i) => /node_modules\/@(aws-sdk|smithy)\//.test(i.path)),
      [],
      b.name,
    );
  }
});

test('only the functions that dispatch compiles carry the Lambda client', () => {
  for (const b of bundles) {
    const carries = b.inputs.some((i) => i.path.includes('@aws-sdk/client-lambda'));
    assert.equal(carries, ['webhook', 'webhookQueue', 'api', 'sweep'].includes(b.name), b.name);
  }
});

test('every page is off /v1/, where the api function loads the pages lazily', () => {
  // functions/api.ts imports lib/pages only for a route off /v1/.
  assert.deepEqual(
    Object.keys(PAGE_ROUTES).filter((key) => key.includes(' /v1/')),
    [],
  );
});

test('the webhook functions load neither yaml, the compiler nor the pages at a cold start', () => {
  // Two small modules stay: the pipeline's limits (constants) and the pages'
  // link signing (statuses link to the job page).
  const small = new Set(['lib/pipeline/limits.ts', 'lib/pages/access.ts']);
  for (const name of ['webhook', 'webhookQueue'] as const) {
    const heavy = bundleOf(name).coldInputs.filter(
      (i) =>
        /node_modules\/yaml\/|^lib\/pipeline\/|^lib\/pages\//.test(i.path) && !small.has(i.path),
    );
    assert.deepEqual(heavy, [], name);
    // What the function reaches lazily still includes the compiler (the local dispatch).
    assert.ok(
      bundleOf(name).inputs.some((i) => i.path === 'lib/pipeline/compile.ts'),
      name,
    );
  }
});

test('email, the XML parser, yaml and the cron parser are loaded by the requests that need them', () => {
  const cold = (name: BundledFunction, pkg: RegExp) =>
    bundleOf(name).coldInputs.some((i) => pkg.test(i.path));
  const reaches = (name: BundledFunction, pkg: RegExp) =>
    bundleOf(name).inputs.some((i) => pkg.test(i.path));
  const nodemailer = /node_modules\/nodemailer\//;
  const xml = /node_modules\/fast-xml-parser\//;
  const yaml = /node_modules\/yaml\//;
  const croner = /node_modules\/croner\//;
  for (const b of bundles) {
    // nodemailer by the first email, fast-xml-parser by the first report read.
    assert.ok(!cold(b.name, nodemailer), `${b.name} loads nodemailer at a cold start`);
    assert.ok(!cold(b.name, xml), `${b.name} loads fast-xml-parser at a cold start`);
  }
  assert.ok(reaches('sweep', nodemailer), 'the sweep sends emails');
  assert.ok(reaches('api', xml), 'the api reads reports');
  // The api loads yaml and the compiler for a manual trigger's inputs only (lib/app/plan.ts).
  assert.ok(!cold('api', yaml), 'api loads yaml at a cold start');
  assert.ok(
    !bundleOf('api').coldInputs.some((i) => i.path === 'lib/pipeline/compile.ts'),
    'api loads the compiler at a cold start',
  );
  assert.ok(reaches('api', yaml), "the api checks a trigger's inputs");
  // A webhook triggers jobs with inputs (a rerun) but never parses a cron.
  for (const name of ['webhook', 'webhookQueue'] as const) {
    assert.ok(!cold(name, croner), `${name} loads croner at a cold start`);
  }
});

test('the functions told CONDUCTOR_PUBLIC_URL are exactly those whose bundle posts commit statuses', () => {
  // A status links to the job page only where the URL is known: a function
  // that starts posting statuses must join STATUS_POSTERS, or its links vanish.
  const posting = bundles
    .filter((b) => b.inputs.some((i) => i.path.endsWith('lib/app/statuses.ts')))
    .map((b) => b.name)
    .sort();
  assert.deepEqual(posting, [...STATUS_POSTERS].sort());
});

test('the functions told the push channel and allowed to post to it are exactly those whose bundle posts hints', () => {
  // hintRunners (lib/app/channel.ts) posts through lib/channel/post.ts after a
  // commit: a function that starts making tasks claimable must join
  // CHANNEL_HINTERS, or its hints fail for want of the URL and the right.
  const hinting = bundles
    .filter((b) => b.inputs.some((i) => i.path === 'lib/channel/post.ts'))
    .map((b) => b.name)
    .sort();
  assert.deepEqual(hinting, [...CHANNEL_HINTERS].sort());
  // The channel function keeps the registry and posts no hint.
  assert.ok(!bundleOf('channel').inputs.some((i) => i.path === 'lib/channel/post.ts'));
});

test('zod ships with English messages only', () => {
  for (const b of bundles) {
    // The locale index itself is there, replaced by an English-only stand-in.
    const locales = b.inputs.filter((i) => /zod\/v4\/locales\/(?!en\.js|index\.js)/.test(i.path));
    assert.deepEqual(locales, [], b.name);
  }
});

test('no function carries classic zod: every schema is zod/mini, through lib/zod.ts', () => {
  for (const b of bundles) {
    const classic = b.inputs.filter((i) => /node_modules\/zod\/v4\/classic\//.test(i.path));
    assert.deepEqual(classic, [], b.name);
    assert.ok(
      b.inputs.some((i) => i.path === 'lib/zod.ts'),
      `${b.name} validates nothing with zod?`,
    );
  }
});

// What a cold start makes Node load (issue #56): Node's http module (on
// Node 22 it brings Node's fetch, undici, with it: 60 to 80 ms of CPU) is
// loaded at the first forge call, not at the import; pg's check for a
// Cloudflare Worker (a `new Response` where `navigator` is missing, as on
// Node 20) is answered at build time.
test("no cold start loads Node's http or its fetch", () => {
  const probe = [
    'const before = new Set(process.moduleLoadList);',
    'await import(process.argv[1]);',
    "const added = process.moduleLoadList.filter((m) => !before.has(m)).map((m) => m.replace(/^NativeModule /, ''));",
    'process.stdout.write(JSON.stringify(added));',
  ].join(' ');
  for (const b of bundles) {
    const url = pathToFileURL(join(b.dir, 'index.mjs')).href;
    const child = spawnSync(process.execPath, ['--input-type=module', '-e', probe, url], {
      encoding: 'utf8',
      env: { PATH: process.env.PATH ?? '' },
    });
    assert.equal(child.status, 0, child.stderr);
    const loaded = JSON.parse(child.stdout) as string[];
    const heavy = loaded.filter((m) =>
      ['http', 'https', 'http2', 'internal/deps/undici/undici'].includes(m),
    );
    assert.deepEqual(heavy, [], `${b.name} loads ${heavy.join(', ')} at a cold start`);
  }
});

test('each bundle is ESM files with their source maps, index.mjs exporting the handler', async () => {
  for (const b of bundles) {
    const files = readdirSync(b.dir, { recursive: true, encoding: 'utf8' }).filter((f) =>
      f.endsWith('.mjs'),
    );
    assert.ok(files.includes('index.mjs'), b.name);
    for (const f of files) {
      assert.ok(existsSync(join(b.dir, `${f}.map`)), `${b.name}'s ${f} has no source map`);
      const name = f.split('/').pop()!.replaceAll('.', '\\.');
      assert.match(
        readFileSync(join(b.dir, f), 'utf8'),
        new RegExp(`sourceMappingURL=${name}\\.map`),
      );
    }
    const file = join(b.dir, 'index.mjs');
    const mod = (await import(pathToFileURL(file).href)) as { handler?: unknown };
    assert.equal(typeof mod.handler, 'function', b.name);
  }
});

test('the migrate bundle carries the migrations and needs no loose .sql file', async () => {
  const dir = bundleOf('migrate').dir;
  const mod = (await import(pathToFileURL(join(dir, 'index.mjs')).href)) as {
    carriedMigrations: () => unknown;
    migrationsHash: (m: unknown) => string;
  };
  assert.deepEqual(mod.carriedMigrations(), loadMigrationSet());
  const written = readFileSync(join(dir, MIGRATIONS_HASH_FILE), 'utf8').trim();
  assert.equal(mod.migrationsHash(mod.carriedMigrations()), written);
});

test('npm run synth works offline, without Docker or AWS credentials', async () => {
  const cdkOut = mkdtempSync(join(tmpdir(), 'conductor-cdk-out-'));
  const fakeBin = mkdtempSync(join(tmpdir(), 'conductor-no-docker-'));
  after(() => {
    rmSync(cdkOut, { recursive: true, force: true });
    rmSync(fakeBin, { recursive: true, force: true });
  });
  // A `docker` first on the PATH that records being called.
  const marker = join(fakeBin, 'docker-was-called');
  writeFileSync(join(fakeBin, 'docker'), `#!/bin/sh\ntouch ${marker}\nexit 1\n`);
  chmodSync(join(fakeBin, 'docker'), 0o755);
  const env = Object.fromEntries(
    Object.entries(process.env).filter(([k]) => !k.startsWith('AWS_') && !k.startsWith('CDK_')),
  );
  const result = await new Promise<{ code: number | null; stderr: string }>((done) => {
    const child = spawn(
      process.execPath,
      ['--import', 'tsx', APP, '--no-bundle', '--bundle-dir', outdir],
      {
        cwd: fileURLToPath(new URL('../..', import.meta.url)),
        env: {
          ...env,
          PATH: `${fakeBin}:${process.env.PATH}`,
          CDK_OUTDIR: cdkOut,
          // Any attempt to reach AWS fails fast instead of finding credentials.
          AWS_EC2_METADATA_DISABLED: 'true',
          AWS_CONFIG_FILE: '/dev/null',
          AWS_SHARED_CREDENTIALS_FILE: '/dev/null',
        },
        stdio: ['ignore', 'ignore', 'pipe'],
      },
    );
    let stderr = '';
    child.stderr.on('data', (d) => {
      stderr += d;
    });
    child.on('exit', (code) => done({ code, stderr }));
  });
  assert.equal(result.code, 0, result.stderr);
  assert.doesNotMatch(result.stderr, /warning/i, 'synthesis warned');
  assert.equal(existsSync(marker), false, 'synthesis called docker');
  const template = JSON.parse(readFileSync(join(cdkOut, 'Conductor.template.json'), 'utf8')) as {
    Resources: Record<string, { Type: string }>;
  };
  const functions = Object.values(template.Resources).filter(
    (r) => r.Type === 'AWS::Lambda::Function',
  );
  assert.equal(functions.length, bundles.length);
  // Each function's asset is its bundle, source map included.
  const assets = JSON.parse(readFileSync(join(cdkOut, 'Conductor.assets.json'), 'utf8')) as {
    files: Record<string, { source: { path: string } }>;
  };
  const staged = Object.values(assets.files)
    .map((f) => join(cdkOut, f.source.path))
    .filter((p) => existsSync(join(p, 'index.mjs')));
  assert.equal(staged.length, bundles.length);
  for (const dir of staged) assert.ok(existsSync(join(dir, 'index.mjs.map')));
});
