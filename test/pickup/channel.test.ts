// The push channel on AWS (#52), through the local stack configured as a
// deployment would be, with fakes on loopback that check what the real ones
// check: API Gateway's WebSocket API (the real channel function behind its
// $connect/$disconnect/$default; SigV4 on every @connections post) and S3
// (s3rver) holding the connection registry. The real runner connects when an
// empty claim offers the channel, claims at once on a hint, and polls when a
// hint is lost or the channel is down.
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { mkdtemp } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, test } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import { ListObjectsV2Command, S3Client } from '@aws-sdk/client-s3';
import pg from 'pg';
// @ts-expect-error s3rver ships no types
import S3rver from 's3rver';
import WebSocket from 'ws';
import { handler } from '../../functions/channel.ts';
import { issueTicket } from '../../lib/channel/ticket.ts';
import { sendPush } from '../../local/push.ts';
import type { RunnerEvent } from '../../runner/index.ts';
import { startFakeApiGateway } from '../helpers/fake-apigw-ws.ts';
import { testStack } from '../helpers/stack.ts';
import { Fixture, gitRepo, waitFor } from '../runner/support.ts';

const REGION = 'eu-west-1';
process.env.AWS_ACCESS_KEY_ID = 'S3RVER';
process.env.AWS_SECRET_ACCESS_KEY = 'S3RVER';
process.env.AWS_REGION = REGION;
delete process.env.AWS_SESSION_TOKEN;

const s3dir = await mkdtemp(join(tmpdir(), 'conductor-channel-s3rver-'));
const s3rver = new S3rver({
  address: '127.0.0.1',
  port: 0,
  silent: true,
  directory: s3dir,
  configureBuckets: [{ name: 'conductor-channel' }],
});
const s3url = `http://127.0.0.1:${(await s3rver.run()).port}`;
after(() => s3rver.close());
const s3 = new S3Client({
  endpoint: s3url,
  region: REGION,
  forcePathStyle: true,
  credentials: { accessKeyId: 'S3RVER', secretAccessKey: 'S3RVER' },
});
async function registry(): Promise<string[]> {
  const out = await s3.send(
    new ListObjectsV2Command({ Bucket: 'conductor-channel', Prefix: 'channel/' }),
  );
  return (out.Contents ?? []).map((o) => o.Key!);
}

const apigw = await startFakeApiGateway({
  region: REGION,
  accessKeyId: 'S3RVER',
  secretAccessKey: 'S3RVER',
});
const stack = await testStack(import.meta.filename, {
  CONDUCTOR_CHANNEL_URL: apigw.url,
  CONDUCTOR_CHANNEL_ENDPOINT: apigw.endpoint,
  CONDUCTOR_CHANNEL_BUCKET: 'conductor-channel',
  CONDUCTOR_CHANNEL_S3_ENDPOINT: s3url,
});

/** A project with a webhook secret, its worker, and a push of a new commit each call. */
async function pushable(label: string) {
  const pipeline = `version: 1\ndefaults:\n  labels: [${label}]\ntasks:\n  quick:\n    script: ['true']\n`;
  const repo = await gitRepo({ '.conductor.yml': pipeline });
  const id = `${label}-${randomBytes(3).toString('hex')}`;
  const project = await stack.call('POST', '/v1/projects', {
    token: stack.adminToken,
    body: { id, name: id, forge: 'github', repo: `acme/${id}`, repo_url: repo.dir },
  });
  assert.equal(project.status, 201, project.text);
  const worker = await stack.call('POST', '/v1/workers', {
    token: stack.adminToken,
    body: { name: `${label}-worker`, labels: [label] },
  });
  assert.equal(worker.status, 201, worker.text);
  const fixture = new Fixture(stack, id, worker.body.token, repo);
  let pushes = 0;
  const push = async () => {
    if (pushes++ > 0) {
      execFileSync(
        'git',
        [
          '-c',
          'user.name=t',
          '-c',
          'user.email=t@t',
          'commit',
          '-q',
          '--allow-empty',
          '-m',
          'again',
        ],
        { cwd: repo.dir },
      );
    }
    const sha = execFileSync('git', ['rev-parse', 'HEAD'], { cwd: repo.dir }).toString().trim();
    const sent = await sendPush({
      url: stack.url,
      forge: 'github',
      repo: `acme/${id}`,
      repoUrl: repo.dir,
      sha,
      ref: 'refs/heads/main',
      secret: project.body.webhook_secret,
    });
    assert.ok(sent.status < 300, sent.text);
  };
  /**
   * The latest task's queued-to-claimed time, on the database's clock, once
   * it has finished (a runner stopped at the end of a test gives back what
   * it runs).
   */
  const waited = async () => {
    const row = await waitFor('the task to finish', async () => {
      const { rows } = await stack.context.pool.query(
        `select t.state, t.attempt, extract(epoch from (t.started_at - t.queued_at)) * 1000 as ms
           from tasks t join jobs j on j.id = t.job_id
          where j.project_id = $1 order by j.number desc limit 1`,
        [id],
      );
      return rows[0]?.state === 'success' ? rows[0] : undefined;
    });
    assert.equal(row.attempt, 1);
    const ms = Number(row.ms);
    assert.ok(ms >= 0, `claimed ${ms} ms after queued`);
    return ms;
  };
  return { fixture, push, waited };
}

async function channelRunner(fixture: Fixture, over: Parameters<Fixture['runner']>[0]) {
  const started: number[] = [];
  const runner = await fixture.runner({
    // No long poll: the channel alone tells this runner.
    claimWaitS: 0,
    ...over,
    onEvent: (e: RunnerEvent) => {
      if (e.type === 'task-started') started.push(Date.now());
    },
  });
  await waitFor('the channel to come up', () => (runner.channelUp() ? true : undefined), 15_000);
  return { runner, started };
}

test('an idle runner on the push channel is hinted, and claims a pushed task within a second', async () => {
  const { fixture, push, waited } = await pushable('ch-fast');
  // Its polls are 10 s apart at most, and 300 s while the channel is up.
  const { started } = await channelRunner(fixture, { pollMinMs: 10_000, pollMaxMs: 10_000 });
  assert.equal((await registry()).length, 1, 'its connection is in the registry');
  await push();
  await waitFor('the first task to start', () => started[0], 20_000);
  await sleep(2_000);
  const hints = apigw.posted.length;
  await push();
  await waitFor('the task to start', () => started[1], 10_000);
  const ms = await waited();
  assert.ok(ms < 1_000, `the task was claimed ${Math.round(ms)} ms after it was queued`);
  await waitFor('the hint to be recorded', () => (apigw.posted.length > hints ? true : undefined));
  assert.deepEqual(JSON.parse(apigw.posted.at(-1)!.data), { type: 'claimable' });
  assert.deepEqual(apigw.refused, [], 'every @connections post was signed right');
});

test("an idle runner's channel makes no database connection: $connect, the idle socket, its keepalive, $disconnect", async () => {
  const pool = stack.context.pool;
  // The earlier test's last task finished, and its completion committed.
  await waitFor('nothing running', async () => {
    const { rows } = await pool.query(
      `select count(*)::int as n from tasks where state in ('queued', 'running')`,
    );
    return rows[0].n === 0 ? true : undefined;
  });
  await sleep(500);
  let calls = 0;
  const query = pool.query.bind(pool);
  const connect = pool.connect.bind(pool);
  // biome-ignore lint/suspicious/noExplicitAny: a counting wrapper around the pool's own methods
  (pool as any).query = (...a: any[]) => {
    calls++;
    // biome-ignore lint/suspicious/noExplicitAny: as above
    return (query as any)(...a);
  };
  // biome-ignore lint/suspicious/noExplicitAny: as above
  (pool as any).connect = (...a: any[]) => {
    calls++;
    // biome-ignore lint/suspicious/noExplicitAny: as above
    return (connect as any)(...a);
  };
  // Counted from a connection of its own, outside the stack's pool.
  const watcher = new pg.Client({ connectionString: stack.context.config.DATABASE_URL });
  await watcher.connect();
  const backends = async () => {
    const { rows } = await watcher.query<{ n: number }>(
      `select count(*)::int as n from pg_stat_activity where datname = current_database()`,
    );
    return rows[0]!.n;
  };
  try {
    const before = await backends();
    const ticket = issueTicket(stack.context.keyring, {
      worker: 'abcdef0123456789',
      labels: ['ch-idle'],
      untrusted: false,
      projects: '*',
    });
    const ws = new WebSocket(apigw.url, { headers: { 'x-conductor-ticket': ticket } });
    await new Promise<void>((done, fail) => {
      ws.once('open', () => done());
      ws.once('error', fail);
    });
    ws.send('{"type":"keepalive"}');
    await sleep(1_500);
    assert.equal((await registry()).length >= 1, true);
    ws.close();
    await waitFor('the $disconnect', async () => (apigw.connections.size === 0 ? true : undefined));
    await sleep(200);
    assert.equal(calls, 0, 'no statement and no connection from the pool');
    assert.ok((await backends()) <= before, 'no new server connection');
  } finally {
    await watcher.end();
    // biome-ignore lint/suspicious/noExplicitAny: restoring the pool's own methods
    (pool as any).query = query;
    // biome-ignore lint/suspicious/noExplicitAny: as above
    (pool as any).connect = connect;
  }
});

test('a ticket that does not verify is refused at $connect, and nothing is registered', async () => {
  const keys = await registry();
  const tampered = issueTicket(stack.context.keyring, {
    worker: 'abcdef0123456789',
    labels: [],
    untrusted: false,
    projects: '*',
  }).replace(/\.[^.]+$/, '.AAAA');
  const ws = new WebSocket(apigw.url, { headers: { 'x-conductor-ticket': tampered } });
  const err = await new Promise<Error>((done) => ws.once('error', done));
  assert.match(err.message, /401/);
  const direct = await handler({
    requestContext: { routeKey: '$connect', connectionId: 'Zm9vYmFy=' },
    headers: {},
  });
  assert.equal(direct.statusCode, 401, 'no ticket at all');
  assert.deepEqual(await registry(), keys);
});

test('a hint lost costs at most one poll; with the channel down the runner polls with its backoff, and reconnects', async () => {
  const { fixture, push, waited } = await pushable('ch-lost');
  const { runner, started } = await channelRunner(fixture, {
    channelPollMs: 2_000,
    pollMinMs: 500,
    pollMaxMs: 1_000,
  });
  await push();
  await waitFor('the first task to start', () => started[0], 20_000);
  await sleep(2_500);
  // Lost: API Gateway takes the post and the runner never hears it.
  apigw.dropPosts = true;
  try {
    await push();
    await waitFor('the task to start', () => started[1], 10_000);
    const ms = await waited();
    assert.ok(ms < 2_000 + 1_000, `claimed ${Math.round(ms)} ms after it was queued`);
  } finally {
    apigw.dropPosts = false;
  }
  // Down: the socket closes and API Gateway refuses new ones (else the
  // runner's next claim, offered the channel again, reconnects within
  // milliseconds, quicker than a look at channelUp() sees it down); the
  // runner polls (1 s at most) until a connect succeeds again.
  apigw.refuseConnects = true;
  try {
    apigw.closeAll();
    await waitFor('the channel to go down', () => (runner.channelUp() ? undefined : true));
    await push();
    await waitFor('the task to start', () => started[2], 10_000);
    const ms = await waited();
    assert.ok(ms < 1_000 + 1_000, `claimed ${Math.round(ms)} ms after it was queued`);
    assert.equal(runner.channelUp(), false, 'the task was claimed by a poll, the channel down');
  } finally {
    apigw.refuseConnects = false;
  }
  await waitFor('the channel to come back', () => (runner.channelUp() ? true : undefined), 15_000);
});
