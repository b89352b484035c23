import assert from 'node:assert/strict';
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, test } from 'node:test';
import {
  fargateCost,
  fargateSize,
  fargateTaskMinute,
  idleCost,
  PRICES,
  pushChannelCost,
  runnersCost,
  total,
  trafficCost,
} from '../../infra/cost.ts';
import { EXISTING_RESOURCES, stubBundles, synth } from './support.ts';

const bundles = stubBundles();

test('the default deployment with one runner polling costs at most $10 a month doing nothing', (t) => {
  const template = synth(bundles).json;
  const idle = idleCost(template, PRICES, { runners: 1 });
  for (const l of idle) t.diagnostic(`${l.item}: $${l.monthly.toFixed(2)}`);
  t.diagnostic(
    `idle with a runner $${total(idle).toFixed(2)}; 1,000 tasks/day +$${total(trafficCost(1000)).toFixed(2)}; 100,000 +$${total(trafficCost(100_000)).toFixed(2)}`,
  );
  assert.ok(total(idle) <= 10, `idle with one runner $${total(idle).toFixed(2)}`);
  assert.ok(!idle.some((l) => /Proxy|NAT gateway/.test(l.item)));
  // The runner's polls: no log lines, no database wakes (tokens in the gate).
  const runner = runnersCost(template, 1);
  assert.equal(runner.find((l) => /logs/.test(l.item))?.monthly, 0);
  assert.equal(runner.find((l) => /wakes/.test(l.item))?.monthly, 0);
});

test('each further idle runner costs its requests, invocations and S3 reads, and never a wake', () => {
  const template = synth(bundles).json;
  const [none, one, three] = [0, 1, 3].map((runners) =>
    total(idleCost(template, PRICES, { runners })),
  );
  const perRunner = one! - none!;
  assert.ok(perRunner > 0.3 && perRunner < 0.6, `$${perRunner.toFixed(2)} a runner`);
  assert.ok(Math.abs(three! - none! - 3 * perRunner) < 0.01);
});

test('the HA shape (NAT gateway, proxy, Aurora at 0.5 ACU) costs what the issue measured', () => {
  const idle = total(
    idleCost(synth(bundles, { nat: 'gateway', proxy: true, minCapacity: 0.5 }).json),
  );
  assert.ok(idle > 150 && idle < 200, `$${idle.toFixed(2)}`);
});

test('with an existing database the idle bill is secrets, alarms and the poller', () => {
  const existing = synth(bundles, EXISTING_RESOURCES);
  const idle = total(idleCost(existing.json));
  assert.ok(idle < 3, `$${idle.toFixed(2)}`);
});

test('with an existing database and the functions outside any VPC, idle costs about $2 a month: no VPC, no NAT', (t) => {
  const outside = synth(bundles, {
    outsideVpc: true,
    existingDatabase: {
      secretArn: 'arn:aws:secretsmanager:eu-west-1:123456789012:secret:conductor-db-AbCdEf',
      host: 'ep-example.eu-west-1.aws.neon.tech',
    },
  });
  const types = Object.values(
    (
      outside.json as {
        Resources: Record<string, { Type: string; Properties?: Record<string, unknown> }>;
      }
    ).Resources,
  );
  for (const forbidden of [
    'AWS::EC2::VPC',
    'AWS::EC2::NatGateway',
    'AWS::EC2::Instance',
    'AWS::EC2::SecurityGroup',
  ]) {
    assert.ok(!types.some((r) => r.Type === forbidden), `no ${forbidden}`);
  }
  for (const fn of types.filter((r) => r.Type === 'AWS::Lambda::Function')) {
    assert.equal(fn.Properties?.VpcConfig, undefined, 'no function is in a VPC');
  }
  const idle = idleCost(outside.json);
  for (const l of idle) t.diagnostic(`${l.item}: $${l.monthly.toFixed(2)}`);
  assert.ok(total(idle) <= 3, `$${total(idle).toFixed(2)}`);
});

test('outsideVpc without an existing database is refused, naming what it needs', () => {
  assert.throws(() => synth(bundles, { outsideVpc: true }), /outsideVpc needs an existingDatabase/);
});

test('an idle runner on the push channel costs at most $0.10 a month, less than one polling', (t) => {
  const pushed = pushChannelCost();
  for (const l of pushed) t.diagnostic(`${l.item}: $${l.monthly.toFixed(4)}`);
  const perRunner = total(pushed);
  t.diagnostic(`push channel: $${perRunner.toFixed(3)} a runner a month`);
  assert.ok(perRunner <= 0.1, `$${perRunner.toFixed(3)} a runner`);
  const polling = total(runnersCost(synth(bundles).json, 1));
  assert.ok(perRunner < polling, `pushed $${perRunner.toFixed(3)}, polling $${polling.toFixed(3)}`);
  // A long poll instead would keep a 512 MB claim Lambda running for the runner.
  const longPoll = PRICES.hoursPerMonth * 3600 * 0.5 * PRICES.lambdaArmGbSecond;
  assert.ok(longPoll > 100 * perRunner, `long poll $${longPoll.toFixed(2)}`);
});

test('Fargate runners: a task-minute at the default 1 vCPU and 2 GB, a month at 1,000 tasks a day of 5 minutes, and nothing for idle runners', (t) => {
  const dir = mkdtempSync(join(tmpdir(), 'conductor-runner-image-'));
  after(() => rmSync(dir, { recursive: true, force: true }));
  mkdirSync(join(dir, 'dist'));
  writeFileSync(join(dir, 'dist', 'conductor-runner.mjs'), '// stand-in\n');
  writeFileSync(join(dir, 'Dockerfile.runner'), 'FROM scratch\n');
  const fleet = synth(bundles, { fargateRunners: true, runnerImageDir: dir }).json;
  const size = fargateSize(fleet);
  assert.deepEqual(size, { cpu: 1024, memoryMiB: 2048 }, 'the task definition as synthesised');
  // $0.04048 a vCPU-hour and $0.004445 a GB-hour, by the minute.
  const minute = fargateTaskMinute(size);
  assert.ok(Math.abs(minute - (0.04048 + 2 * 0.004445) / 60) < 1e-9, String(minute));
  const month = fargateCost(1_000, 5, size);
  for (const l of month) t.diagnostic(`${l.item}: $${l.monthly.toFixed(2)}`);
  t.diagnostic(`a task-minute $${minute.toFixed(5)}; a month $${total(month).toFixed(2)}`);
  // 30,000 tasks of 5.5 billed minutes (the image pull and start included).
  assert.ok(Math.abs(month[0]!.monthly - 30_000 * 5.5 * minute) < 0.01);
  assert.ok(total(month) > 130 && total(month) < 140, `$${total(month).toFixed(2)}`);
  // A task of seconds is billed Fargate's minute.
  assert.ok(Math.abs(fargateCost(1, 0.1, size)[0]!.monthly - 30 * minute) < 1e-9);
  // Idle: the image's storage and nothing else; no runner, however many a pool may launch.
  const idle = idleCost(fleet);
  const byDefault = idleCost(synth(bundles).json);
  const extra = idle.filter((l) => !byDefault.some((d) => d.item === l.item));
  assert.deepEqual(
    extra.map((l) => l.item),
    ["Fargate runners' image in ECR (~0.2 GB; no runner runs while idle)"],
  );
  assert.ok(Math.abs(total(idle) - total(byDefault) - extra[0]!.monthly) < 1e-9);
  assert.ok(extra[0]!.monthly < 0.05);
});
