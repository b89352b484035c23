// Logs (docs/limits.md): a quota per job, at which a chunk answers 413 and
// the task runs on; and the control plane's masking of what is stored: every
// encoded form of a secret, and a secret cut over any number of chunks.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { assertError } from './assertions.ts';
import {
  claimTask,
  complete,
  createWorker,
  heartbeat,
  type Json,
  pushRunning,
  putSecret,
  startE2E,
  uploadLog,
} from './calls.ts';

const MiB = 1024 * 1024;
const REPO = 'acme/log-limits';
const SECRET = 'correct-horse/battery staple';
const {
  fake,
  stack,
  projects: { project },
} = await startE2E(import.meta.filename, {
  // The smallest quota there is: 1 MiB per job, counted in blocks of 16 KiB.
  env: { CONDUCTOR_JOB_LOG_MAX_BYTES: String(MiB) },
  projects: {
    project: { forge: 'github', id: 'log-limits', repo: REPO, cancel_superseded: false },
  },
});
await putSecret(stack, 'log-limits', 'PASSPHRASE', SECRET);

/** A running job of `tasks` labelled `label`, a worker for it, and its tasks claimed. */
async function claimed(label: string, tasks: string, count = 1) {
  await pushRunning({ fake, stack }, { repo: REPO, secret: project.secret }, label, tasks);
  const { token } = await createWorker(stack, [label]);
  const claims = [];
  for (let i = 0; i < count; i++) claims.push(await claimTask(stack, token));
  return { tasks: claims, token };
}

/** Sends `parts` as consecutive chunks of the task's log, asserting each is stored. */
async function send(token: string, task: Json, parts: string[]) {
  let offset = 0;
  for (const data of parts) {
    const res = await uploadLog(stack, token, task.id, { lease_id: task.lease_id, offset, data });
    assert.equal(res.status, 200, res.text);
    offset += Buffer.byteLength(data);
  }
  return offset;
}

async function readLog(taskId: string): Promise<string> {
  const res = await stack.call('GET', `/v1/tasks/${taskId}/log`, { token: stack.adminToken });
  assert.equal(res.status, 200, res.text);
  return res.text;
}

test("a job's logs stop at its quota with a 413 naming it, its tasks run on, and other jobs log on", async () => {
  const two = '  a:\n    script: [make]\n  b:\n    script: [make]\n';
  const {
    tasks: [a, b],
    token,
  } = await claimed('quota', two, 2);
  const quarter = 'q'.repeat(MiB / 4);
  const sizeA = await send(token, a!, [quarter, quarter]);
  const sizeB = await send(token, b!, [quarter, quarter]);
  assert.equal(sizeA + sizeB, MiB, 'the whole quota is used, and was accepted');

  for (const task of [a!, b!]) {
    const over = await uploadLog(stack, token, task.id, {
      lease_id: task.lease_id,
      offset: MiB / 2,
      data: 'one byte too many\n',
    });
    assertError(over, 413, 'payload_too_large');
    assert.match(
      over.body.error.message,
      /the logs of this job reached their quota of 1048576 bytes \(1 MiB\)/,
    );
    assert.equal((await heartbeat(stack, token, task.id, task.lease_id)).status, 200);
  }
  assert.equal((await readLog(a!.id)).length, MiB / 2, 'what fitted is kept');
  for (const task of [a!, b!]) {
    const done = await complete(stack, token, task.id, {
      lease_id: task.lease_id,
      outcome: 'success',
    });
    assert.equal(done.status, 200, done.text);
    assert.equal(done.body.state, 'success');
  }

  // The quota is the job's: the next job starts with all of it.
  const {
    tasks: [c],
    token: other,
  } = await claimed('quota-next', '  c:\n    script: [make]\n');
  assert.equal(await send(other, c!, [quarter, quarter, quarter]), (3 * MiB) / 4);
});

test('a secret is masked in every encoded form the control plane is sent it in', async () => {
  const {
    tasks: [task],
    token,
  } = await claimed('forms', '  a:\n    secrets: [PASSPHRASE]\n    script: [make]\n');
  const b64 = (before: string) => Buffer.from(`${before}${SECRET}!`).toString('base64');
  const lines = [
    `plain ${SECRET}`,
    `base64 ${b64('')} ${b64('u')} ${b64('us')}`,
    `url ${encodeURIComponent(SECRET)} ${encodeURIComponent(SECRET).toLowerCase()}`,
    `json ${JSON.stringify(SECRET).replace(/\//g, '\\/')}`,
    `escaped "${SECRET.replace(/-/g, '\\u002d').replace(/ /g, '\\u0020')}"`,
  ];
  await send(token, task!, [`${lines.join('\n')}\n`]);
  const stored = await readLog(task!.id);
  assert.equal(stored.split('\n')[0], 'plain ***');
  assert.equal(stored.split('\n')[2], 'url *** ***');
  assert.equal(stored.split('\n')[3], 'json "***"');
  assert.equal(stored.split('\n')[4], 'escaped "***"');
  assert.equal(stored.split('\n')[1]?.match(/\*\*\*/g)?.length, 3, stored);
  for (const piece of ['horse', 'battery', 'Y29ycmVjdC1ob3Jz', 'b3JyZWN0LWhvcnNl']) {
    assert.ok(!stored.includes(piece), `${piece} is stored: ${stored}`);
  }
});

test('a secret cut over three chunks is masked once its last piece arrives, and so is a URL-encoded one', async () => {
  const {
    tasks: [task],
    token,
  } = await claimed('three-chunks', '  a:\n    secrets: [PASSPHRASE]\n    script: [make]\n');
  const encoded = encodeURIComponent(SECRET);
  const text = `the key: ${SECRET} and ${encoded}\n`;
  // Cut inside the secret twice and inside a %XX escape of the encoded one.
  const cuts = [13, 24, text.indexOf('%2F') + 2];
  const parts = [0, ...cuts].map((start, i) => text.slice(start, [...cuts, text.length][i]));
  assert.equal(parts.join(''), text);
  const size = await send(token, task!, parts);
  assert.equal(size, Buffer.byteLength(text));
  assert.equal(await readLog(task!.id), 'the key: *** and ***\n');
  // Read from where each chunk began, as a reader following the log would:
  // the secret never shows whole.
  let followed = '';
  let offset = 0;
  for (const part of parts) {
    const res = await stack.call('GET', `/v1/tasks/${task!.id}/log?offset=${offset}`, {
      token: stack.adminToken,
    });
    followed += res.text;
    offset += Buffer.byteLength(part);
    assert.ok(!followed.includes(SECRET), followed);
  }
});

test('a secret shorter than 4 characters is stored with a warning that it will not be masked', async () => {
  const short = await stack.call('PUT', '/v1/projects/log-limits/secrets/PIN', {
    token: stack.adminToken,
    body: { value: '123' },
  });
  assert.equal(short.status, 204, short.text);
  assert.equal(
    short.headers.get('x-conductor-warning'),
    'secret PIN is shorter than 4 characters, so it is not masked in logs, errors or outputs',
  );
  const long = await stack.call('PUT', '/v1/projects/log-limits/secrets/PIN', {
    token: stack.adminToken,
    body: { value: '1234' },
  });
  assert.equal(long.status, 204, long.text);
  assert.equal(long.headers.get('x-conductor-warning'), null);
});
