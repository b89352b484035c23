// The `ecs` provider against a fake ECS endpoint on loopback, through the
// local stack: the AWS SDK's own ECS client (its endpoint set) sends JSON 1.1
// requests, which the fake checks as ECS does (the target, the content type,
// a SigV4 signature recomputed for service `ecs` and the pool's region) and
// answers in ECS's shapes (API reference: RunTask, DescribeTasks, StopTask,
// Failure). The token files go to s3rver. No runner runs: the fake says what
// its tasks do.
import assert from 'node:assert/strict';
import { randomBytes, randomUUID } from 'node:crypto';
import { mkdtemp, rm } from 'node:fs/promises';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, test } from 'node:test';
import { GetObjectCommand, ListObjectsV2Command, S3Client } from '@aws-sdk/client-s3';
import { SignatureV4 } from '@smithy/signature-v4';
// @ts-expect-error s3rver ships no types
import S3rver from 's3rver';
import { runSweep } from '../../lib/app/sweep.ts';
import { EcsProvider } from '../../lib/fleet/ecs.ts';
import { LaunchError } from '../../lib/fleet/provider.ts';
import { Sha256 } from '../helpers/sdk-sha256.ts';
import { testStack } from '../helpers/stack.ts';
import { waitFor } from '../runner/support.ts';
import { poolProject } from './support.ts';

const REGION = 'eu-west-1';
// s3rver knows this key only; the fake ECS checks signatures made with it.
const KEY_ID = 'S3RVER';
const SECRET = 'S3RVER';
// The SDK's default chain reads these (as a Lambda's role gives them), for
// both the ECS and the S3 client.
process.env.AWS_ACCESS_KEY_ID = KEY_ID;
process.env.AWS_SECRET_ACCESS_KEY = SECRET;
delete process.env.AWS_SESSION_TOKEN;
delete process.env.AWS_PROFILE;

// ---- s3rver: the token files' bucket ----
const s3dir = await mkdtemp(join(tmpdir(), 'conductor-ecs-s3rver-'));
const s3rver = new S3rver({
  address: '127.0.0.1',
  port: 0,
  silent: true,
  directory: s3dir,
  configureBuckets: [{ name: 'runner-tokens' }],
});
const s3port = (await s3rver.run()).port as number;
const s3 = new S3Client({
  endpoint: `http://127.0.0.1:${s3port}`,
  region: REGION,
  forcePathStyle: true,
  credentials: { accessKeyId: 'S3RVER', secretAccessKey: 'S3RVER' },
});

async function tokenFiles(): Promise<string[]> {
  const out = await s3.send(new ListObjectsV2Command({ Bucket: 'runner-tokens' }));
  return (out.Contents ?? []).map((o) => o.Key!).sort();
}

async function tokenFile(key: string): Promise<string> {
  const out = await s3.send(new GetObjectCommand({ Bucket: 'runner-tokens', Key: key }));
  return out.Body!.transformToString();
}

// ---- the fake ECS ----
// biome-ignore lint/suspicious/noExplicitAny: the fake reads whatever JSON the SDK sends
type Json = any;
interface Call {
  action: string;
  body: Json;
  raw: string;
}
const calls: Call[] = [];
/** Requests the fake refused (a bad signature, target or content type): none is expected. */
const refused: string[] = [];
/** The tasks the fake "runs", by ARN. */
const tasks = new Map<string, Json>();
/** What RunTask answers next: a task, a failures[] entry, or throttling. */
let runTaskMode: 'ok' | 'capacity' | 'throttle' = 'ok';
const signer = new SignatureV4({
  service: 'ecs',
  region: REGION,
  credentials: { accessKeyId: KEY_ID, secretAccessKey: SECRET },
  sha256: Sha256,
});
const TARGET = 'AmazonEC2ContainerServiceV20141113.';
const CLUSTER_ARN = 'arn:aws:ecs:eu-west-1:123456789012:cluster/conductor-runners';

/** Recomputes the request's SigV4 signature over the headers it says it signed; an error or undefined. */
async function badSignature(
  headers: Record<string, string | string[] | undefined>,
  raw: string,
  url: string,
): Promise<string | undefined> {
  const auth = String(headers.authorization ?? '');
  const m =
    /^AWS4-HMAC-SHA256 Credential=([^/]+)\/(\d{8})\/([^/]+)\/([^/]+)\/aws4_request, SignedHeaders=([^,]+), Signature=([0-9a-f]{64})$/.exec(
      auth,
    );
  if (!m) return `no SigV4 Authorization header: ${auth}`;
  if (m[1] !== KEY_ID) return `signed with key ${m[1]}`;
  if (m[3] !== REGION || m[4] !== 'ecs') return `signed for ${m[3]}/${m[4]}, not ${REGION}/ecs`;
  const date = String(headers['x-amz-date'] ?? '');
  const d = /^(\d{4})(\d{2})(\d{2})T(\d{2})(\d{2})(\d{2})Z$/.exec(date);
  if (!d) return `x-amz-date ${date}`;
  const signed: Record<string, string> = {};
  for (const name of m[5]!.split(';')) signed[name] = String(headers[name] ?? '');
  const again = await signer.sign(
    {
      method: 'POST',
      protocol: 'http:',
      hostname: '127.0.0.1',
      path: url,
      headers: signed,
      body: raw,
    },
    { signingDate: new Date(`${d[1]}-${d[2]}-${d[3]}T${d[4]}:${d[5]}:${d[6]}Z`) },
  );
  return again.headers.authorization === auth ? undefined : 'the signature does not match';
}

const ecs = createServer((req, res) => {
  const chunks: Buffer[] = [];
  req.on('data', (c: Buffer) => chunks.push(c));
  req.on('end', async () => {
    const raw = Buffer.concat(chunks).toString('utf8');
    const answer = (status: number, body: unknown, type?: string) => {
      res.writeHead(status, {
        'content-type': 'application/x-amz-json-1.1',
        'x-amzn-requestid': randomUUID(),
        ...(type ? { 'x-amzn-errortype': type } : {}),
      });
      res.end(JSON.stringify(body));
    };
    const target = String(req.headers['x-amz-target'] ?? '');
    const problem =
      req.method !== 'POST'
        ? `method ${req.method}`
        : req.headers['content-type'] !== 'application/x-amz-json-1.1'
          ? `content-type ${req.headers['content-type']}`
          : !target.startsWith(TARGET)
            ? `target ${target}`
            : await badSignature(req.headers, raw, req.url ?? '/');
    if (problem) {
      refused.push(problem);
      answer(
        403,
        { __type: 'InvalidSignatureException', message: problem },
        'InvalidSignatureException',
      );
      return;
    }
    const action = target.slice(TARGET.length);
    const body = JSON.parse(raw);
    calls.push({ action, body, raw });
    if (action === 'RunTask') {
      if (runTaskMode === 'throttle') {
        answer(
          400,
          { __type: 'ThrottlingException', message: 'Rate exceeded' },
          'ThrottlingException',
        );
        return;
      }
      if (runTaskMode === 'capacity') {
        answer(200, {
          tasks: [],
          failures: [
            {
              arn: CLUSTER_ARN,
              reason:
                'Capacity is unavailable at this time. Please try again later or in a different availability zone',
            },
          ],
        });
        return;
      }
      const task = {
        taskArn: `arn:aws:ecs:${REGION}:123456789012:task/conductor-runners/${randomBytes(16).toString('hex')}`,
        clusterArn: CLUSTER_ARN,
        taskDefinitionArn: `arn:aws:ecs:${REGION}:123456789012:task-definition/${body.taskDefinition}`,
        launchType: 'FARGATE',
        lastStatus: 'PROVISIONING',
        desiredStatus: 'RUNNING',
        startedBy: body.startedBy,
        overrides: body.overrides,
        tags: body.tags,
      };
      tasks.set(task.taskArn, task);
      answer(200, { tasks: [task], failures: [] });
      return;
    }
    if (action === 'DescribeTasks') {
      const known = (body.tasks as string[]).filter((a) => tasks.has(a));
      answer(200, {
        tasks: known.map((a) => tasks.get(a)),
        failures: (body.tasks as string[])
          .filter((a) => !tasks.has(a))
          .map((arn) => ({ arn, reason: 'MISSING' })),
      });
      return;
    }
    if (action === 'StopTask') {
      const t = tasks.get(body.task);
      if (!t) {
        answer(
          400,
          { __type: 'InvalidParameterException', message: 'The referenced task was not found.' },
          'InvalidParameterException',
        );
        return;
      }
      t.desiredStatus = 'STOPPED';
      t.stoppedReason = body.reason;
      answer(200, { task: t });
      return;
    }
    answer(400, { __type: 'UnknownOperationException' }, 'UnknownOperationException');
  });
});
await new Promise<void>((resolve) => ecs.listen(0, '127.0.0.1', resolve));
const ecsEndpoint = `http://127.0.0.1:${(ecs.address() as AddressInfo).port}`;

const stack = await testStack(import.meta.filename, {
  CONDUCTOR_ECS_ENDPOINT: ecsEndpoint,
  CONDUCTOR_RUNNER_TOKEN_S3_ENDPOINT: `http://127.0.0.1:${s3port}`,
});
const admin = { token: stack.adminToken };

after(async () => {
  s3.destroy();
  ecs.closeAllConnections();
  await new Promise((resolve) => ecs.close(resolve));
  s3rver.httpServer.closeAllConnections();
  await s3rver.close();
  await rm(s3dir, { recursive: true, force: true });
  assert.deepEqual(refused, [], 'the fake ECS refused no request');
});

const SETTINGS = {
  cluster: 'conductor-runners',
  task_definition: 'conductor-runner:3',
  subnets: ['subnet-0a1', 'subnet-0b2'],
  security_groups: ['sg-0runner'],
  token_bucket: 'runner-tokens',
  region: REGION,
  url: 'https://ci.example.com',
};

/** A project whose push queues one task under `label`, and an ecs pool serving it. */
const setup = (label: string) =>
  poolProject(stack, label, '  build:\n    script: [echo built]\n', {
    provider: 'ecs',
    max: 2,
    settings: SETTINGS,
  });

async function queueReason(jobId: string): Promise<string | null> {
  const res = await stack.call('GET', `/v1/jobs/${jobId}`, admin);
  assert.equal(res.status, 200, res.text);
  return res.body.tasks[0]?.queue_reason ?? null;
}

async function poolWorkers(pool: string) {
  const res = await stack.call('GET', '/v1/workers', admin);
  return (res.body.workers as { name: string; revoked: boolean }[]).filter(
    (w) => w.name === `pool ${pool}`,
  );
}

const runTasksOf = (pool: string) =>
  calls.filter((c) => c.action === 'RunTask' && c.body.startedBy === `conductor-${pool}`);

/** The key of the token file a RunTask's override names. */
function tokenKeyOf(call: Call): string {
  const files = call.body.overrides.containerOverrides[0].environmentFiles;
  assert.equal(files.length, 1);
  assert.equal(files[0].type, 's3');
  const m = /^arn:aws:s3:::runner-tokens\/(runner-tokens\/[0-9a-f-]+-\d+\.env)$/.exec(
    files[0].value,
  );
  assert.ok(m, files[0].value);
  return m[1]!;
}

test("a push launches a Fargate task: RunTask's cluster, task definition, awsvpc network, no public IP, and an override naming the token's file, never the token", async () => {
  const { id, push } = await setup('ecs-run');
  const jobId = await push();
  const [call] = await waitFor('a RunTask', () => {
    const c = runTasksOf(id);
    return c.length > 0 ? c : undefined;
  });
  const b = call!.body;
  assert.equal(b.cluster, 'conductor-runners');
  assert.equal(b.taskDefinition, 'conductor-runner:3');
  assert.equal(b.launchType, 'FARGATE');
  assert.equal(b.count, 1);
  assert.deepEqual(b.networkConfiguration, {
    awsvpcConfiguration: {
      subnets: ['subnet-0a1', 'subnet-0b2'],
      securityGroups: ['sg-0runner'],
      assignPublicIp: 'DISABLED',
    },
  });
  const [override] = b.overrides.containerOverrides;
  assert.equal(override.name, 'runner');
  assert.deepEqual(override.command, [
    '--url',
    'https://ci.example.com',
    '--once',
    '--idle-limit-s',
    '60',
    '--executor',
    'shell',
  ]);
  assert.equal(override.environment, undefined, 'no variable in the override');
  assert.match(b.clientToken, /^[0-9a-f-]{36}-1$/);
  assert.ok(b.clientToken.length <= 64);

  // The token is in the file ECS reads, and nowhere in any request ECS saw.
  const key = tokenKeyOf(call!);
  const file = await tokenFile(key);
  const m = /^CONDUCTOR_RUNNER_TOKEN=(cw_\S+)\n$/.exec(file);
  assert.ok(m, 'the file is one variable');
  const token = m[1]!;
  assert.ok(
    calls.every((c) => !c.raw.includes(token)),
    'no ECS request carries the token',
  );
  // The token is the launch worker's: a claim naming a label it was not
  // registered with is refused as such (400), not as a stranger (401).
  const claim = await stack.call('POST', '/v1/runner/claim', {
    token,
    body: { labels: ['x-none'] },
  });
  assert.equal(claim.status, 400, claim.text);
  // The launch is the pool's one starting runner.
  const pools = await stack.call('GET', '/v1/pools', admin);
  const view = pools.body.pools.find((p: { name: string }) => p.name === id);
  assert.equal(view.runners.starting + view.runners.running, 1);

  // The task comes up: the reconcile sees it RUNNING, keeps it, and deletes
  // the token file ECS has read.
  const arn = [...tasks.values()].find((t) => t.overrides === b.overrides)?.taskArn as string;
  tasks.get(arn).lastStatus = 'RUNNING';
  await runSweep(stack.context);
  const described = calls.filter((c) => c.action === 'DescribeTasks').at(-1)!.body;
  assert.equal(described.cluster, 'conductor-runners');
  assert.ok(described.tasks.includes(arn));
  assert.ok(!(await tokenFiles()).includes(key), 'the token file is gone once the task runs');
  assert.equal((await poolWorkers(id)).filter((w) => !w.revoked).length, 1);

  // The runner exits (its claim found nothing, say): DescribeTasks shows
  // it STOPPED, the launch ends, its worker is revoked, and the task still
  // waiting gets a new launch with a new token.
  tasks.get(arn).lastStatus = 'STOPPED';
  tasks.get(arn).stoppedReason = 'Essential container in task exited';
  await runSweep(stack.context);
  const runs = runTasksOf(id);
  assert.equal(runs.length, 2, 'a second launch for the task still queued');
  assert.notEqual(runs[1]!.body.clientToken, b.clientToken);
  const workers = await poolWorkers(id);
  assert.equal(workers.length, 2);
  assert.equal(workers.filter((w) => w.revoked).length, 1, 'the first launch worker is revoked');
  const again = await stack.call('POST', '/v1/runner/claim', {
    token,
    body: { labels: ['x-none'] },
  });
  assert.equal(again.status, 401, 'the first token is worth nothing now');
  assert.equal(
    calls.filter((c) => c.action === 'StopTask').length,
    0,
    'a stopped task is not stopped again',
  );

  // The pool is deleted while its second task still runs: its runner is
  // stopped then (the sweep would no longer know the pool's settings).
  const second = [...tasks.values()].find((t) => t.overrides === runs[1]!.body.overrides)!;
  second.lastStatus = 'RUNNING';
  const secondKey = tokenKeyOf(runs[1]!);
  assert.equal((await stack.call('DELETE', `/v1/pools/${id}`, admin)).status, 204);
  const stops = calls.filter((c) => c.action === 'StopTask');
  assert.equal(stops.length, 1);
  assert.deepEqual(stops[0]!.body, {
    cluster: 'conductor-runners',
    task: second.taskArn,
    reason: 'conductor: launch ended',
  });
  assert.ok(!(await tokenFiles()).includes(secondKey));
  assert.ok(
    (await poolWorkers(id)).every((w) => w.revoked),
    'every launched worker is revoked',
  );
  const cancel = await stack.call('POST', `/v1/jobs/${jobId}/cancel`, admin);
  assert.equal(cancel.status, 200, cancel.text);
});

test("RunTask's failures[] (no capacity) and throttling are the task's waiting reason, tried again with backoff, until a task starts", async () => {
  const { id, push } = await setup('ecs-fail');
  runTaskMode = 'capacity';
  const leftBefore = await tokenFiles();
  const jobId = await push();
  const first = await waitFor('the capacity reason', async () => {
    const r = await queueReason(jobId);
    return r?.includes('failed') ? r : undefined;
  });
  assert.match(
    first,
    new RegExp(
      `^launching a runner in pool ${id} failed \\(try 1\\): RunTask started no task: Capacity is unavailable at this time\\. .*; next try in [1-5] s$`,
    ),
  );
  assert.equal(runTasksOf(id).length, 1);
  assert.deepEqual(
    await tokenFiles(),
    leftBefore,
    'no token file is left of a RunTask that started nothing',
  );

  // A sweep before the backoff has passed tries nothing.
  await runSweep(stack.context);
  assert.equal(runTasksOf(id).length, 1, 'nothing tried again before the backoff');

  // Throttled: one request per try (the SDK's own retries are off), the reason says so.
  runTaskMode = 'throttle';
  const second = await waitFor(
    'the throttling reason',
    async () => {
      await runSweep(stack.context);
      const r = await queueReason(jobId);
      return r?.includes('try 2') ? r : undefined;
    },
    15_000,
  );
  assert.match(
    second,
    new RegExp(
      `^launching a runner in pool ${id} failed \\(try 2\\): RunTask failed: ThrottlingException: Rate exceeded; next try in ([4-9]|10) s$`,
    ),
  );
  assert.equal(runTasksOf(id).length, 2, 'one RunTask per try');
  assert.deepEqual(await tokenFiles(), leftBefore);

  // ECS has room again: the next try starts a task and the reason is no longer a failure.
  runTaskMode = 'ok';
  await waitFor(
    'a started task',
    async () => {
      await runSweep(stack.context);
      return runTasksOf(id).length === 3 ? true : undefined;
    },
    20_000,
  );
  assert.match(runTasksOf(id)[2]!.body.clientToken, /-3$/);
  const reason = await queueReason(jobId);
  assert.ok(!reason?.includes('failed'), String(reason));
  assert.deepEqual(await tokenFiles(), [...leftBefore, tokenKeyOf(runTasksOf(id)[2]!)].sort());
  const cancel = await stack.call('POST', `/v1/jobs/${jobId}/cancel`, admin);
  assert.equal(cancel.status, 200, cancel.text);
});

test('assign_public_ip asks for one; a throttled RunTask is a retryable LaunchError; a stopped task already gone is not an error', async () => {
  const provider = new EcsProvider({
    endpoint: ecsEndpoint,
    s3Endpoint: `http://127.0.0.1:${s3port}`,
    tokenPrefix: 'runner-tokens/',
  });
  const pool = {
    name: 'direct',
    labels: [],
    trust: 'untrusted' as const,
    projects: '*' as const,
    provider: 'ecs' as const,
    max: 1,
    settings: { ...SETTINGS, assign_public_ip: true, security_groups: [], executor: 'docker' },
    created_at: new Date(),
    updated_at: new Date(),
  };
  const spec = {
    launchId: randomUUID(),
    attempt: 1,
    pool,
    projectId: 'p',
    url: 'https://ci.example.com',
    token: `cw_${randomBytes(16).toString('hex')}`,
  };
  runTaskMode = 'ok';
  const arn = await provider.launch(spec);
  const call = calls.filter((c) => c.action === 'RunTask').at(-1)!;
  assert.equal(call.body.networkConfiguration.awsvpcConfiguration.assignPublicIp, 'ENABLED');
  assert.deepEqual(call.body.networkConfiguration.awsvpcConfiguration.securityGroups, []);
  assert.deepEqual(call.body.overrides.containerOverrides[0].command.slice(-3), [
    '--executor',
    'docker',
    '--untrusted',
  ]);
  assert.ok(!call.raw.includes(spec.token));

  runTaskMode = 'throttle';
  await assert.rejects(provider.launch({ ...spec, attempt: 2 }), (err) => {
    assert.ok(err instanceof LaunchError);
    assert.equal(err.retryable, true);
    assert.match(err.message, /ThrottlingException: Rate exceeded/);
    return true;
  });
  runTaskMode = 'ok';

  // A task ECS no longer knows is not running, and stopping it is no error.
  tasks.delete(arn);
  assert.deepEqual(await provider.running(pool, [arn]), new Set());
  await provider.stop(pool, arn);
  assert.equal(calls.at(-1)!.action, 'StopTask');
});
