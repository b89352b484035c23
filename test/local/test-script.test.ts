// `npm test` cannot hang: a test file still running at
// CONDUCTOR_TEST_FILE_TIMEOUT_S fails, named, whether it is stuck in a test or
// in a hook, or kept alive by a handle it leaked; the whole run stops at
// CONDUCTOR_TEST_RUN_TIMEOUT_S, naming the files still running, with none of
// their processes left behind.
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { existsSync, readFileSync } from 'node:fs';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, test } from 'node:test';
import { fileURLToPath } from 'node:url';
import { adminUrl } from '../helpers/db.ts';

const root = fileURLToPath(new URL('../../', import.meta.url));
const dir = await mkdtemp(join(tmpdir(), 'conductor-test-script-'));
after(() => rm(dir, { recursive: true, force: true }));
await writeFile(join(dir, 'package.json'), '{"type":"module"}\n');
// Writes its pid, passes one test, then its after hook never returns (as a
// stack.stop() waiting on something that never ends would).
await writeFile(
  join(dir, 'hangs.test.ts'),
  `import { writeFileSync } from 'node:fs';
import { after, test } from 'node:test';
writeFileSync(${JSON.stringify(join(dir, 'pid'))}, String(process.pid));
after(() => new Promise(() => setInterval(() => {}, 1000)));
test('passes before the file hangs', () => {});
`,
);
// Passes, but leaves an interval behind that would keep its process alive.
await writeFile(
  join(dir, 'leaks.test.ts'),
  `import { test } from 'node:test';
test('passes and leaks a timer', () => {
  setInterval(() => {}, 1000);
});
`,
);
await writeFile(
  join(dir, 'slow.test.ts'),
  `import { test } from 'node:test';
test('sleeps past its limit', () => new Promise((r) => setTimeout(r, 60_000)));
`,
);

function run(file: string, env: Record<string, string>) {
  // Without this file's own runner context, so the script runs as npm test would.
  const { NODE_TEST_CONTEXT: _, ...outer } = process.env;
  const child = spawn(process.execPath, ['--import', 'tsx', 'scripts/test.ts', file], {
    cwd: root,
    env: { ...outer, DATABASE_URL: adminUrl(), ...env },
  });
  let out = '';
  child.stdout.on('data', (c) => {
    out += c;
  });
  child.stderr.on('data', (c) => {
    out += c;
  });
  return new Promise<{ code: number | null; out: string }>((done) =>
    child.on('close', (code) => done({ code, out })),
  );
}

/** Whether the process still runs (a zombie waiting for its reaper does not). */
const alive = (pid: number) => {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    return stat.slice(stat.lastIndexOf(')') + 2)[0] !== 'Z';
  } catch {
    return false;
  }
};

test('a file that hangs in a hook stops the run at its limit, named, and leaves no process behind', async () => {
  const r = await run(join(dir, 'hangs.test.ts'), { CONDUCTOR_TEST_RUN_TIMEOUT_S: '4' });
  assert.equal(r.code, 1, r.out);
  assert.match(r.out, /ok 1 - passes before the file hangs/);
  assert.match(
    r.out,
    /went past CONDUCTOR_TEST_RUN_TIMEOUT_S=4 s: stopping it; still running: .*hangs\.test\.ts/,
  );
  assert.ok(existsSync(join(dir, 'pid')));
  const pid = Number(readFileSync(join(dir, 'pid'), 'utf8'));
  assert.equal(alive(pid), false, `the hung file's process ${pid} is gone`);
});

test('a file past its limit fails, named, and the run ends with it', async () => {
  const r = await run(join(dir, 'slow.test.ts'), { CONDUCTOR_TEST_FILE_TIMEOUT_S: '1' });
  assert.equal(r.code, 1, r.out);
  assert.match(r.out, /not ok 1 - .*slow\.test\.ts/);
  assert.match(r.out, /test timed out after 1000ms/);
  assert.doesNotMatch(r.out, /went past/);
});

for (const [file, passed, what] of [
  ['hangs', 'passes before the file hangs', 'hangs in a hook after its tests passed'],
  ['leaks', 'passes and leaks a timer', 'passes but leaks a handle'],
] as const) {
  test(`a file that ${what} fails at the file limit, named, instead of holding the run`, async () => {
    const r = await run(join(dir, `${file}.test.ts`), { CONDUCTOR_TEST_FILE_TIMEOUT_S: '3' });
    assert.equal(r.code, 1, r.out);
    assert.match(r.out, new RegExp(`ok 1 - ${passed}`));
    assert.match(r.out, new RegExp(`not ok \\d+ - .*${file}\\.test\\.ts`));
    assert.match(r.out, /test timed out after 3000ms/);
  });
}
