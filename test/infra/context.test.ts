import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'node:test';
import { fileURLToPath } from 'node:url';
import { aws_logs as logs } from 'aws-cdk-lib';
import {
  ContextError,
  ContextSchema,
  contextFromArgs,
  propsFromContext,
  VALID_VALUES,
} from '../../infra/context.ts';

const ROOT = fileURLToPath(new URL('../..', import.meta.url));

const fromArgs = (...args: string[]) => {
  const context = contextFromArgs(args);
  return propsFromContext((key) => context[key]);
};

test('with no context the stack takes its defaults', () => {
  const { stackName, props } = fromArgs();
  assert.equal(stackName, 'Conductor');
  assert.deepEqual(
    Object.entries(props).filter(([, v]) => v !== undefined),
    [],
  );
});

test('command-line context strings become typed stack settings', () => {
  const { stackName, props } = fromArgs(
    '-c',
    'stackName=ConductorDev',
    '-c',
    'proxy=false',
    '--context',
    'minCapacity=0',
    '-c',
    'sweepIntervalMinutes=15',
    '-c',
    'nat=instance',
    '-c',
    'logRetentionDays=14',
    '-c',
    'existingDatabase={"secretArn":"arn:aws:secretsmanager:us-east-1:123456789012:secret:db-AbC123","host":"db.example"}',
  );
  assert.equal(stackName, 'ConductorDev');
  assert.equal(props.proxy, false);
  assert.equal(props.minCapacity, 0);
  assert.equal(props.sweepInterval?.toMinutes(), 15);
  assert.equal(props.nat, 'instance');
  assert.equal(props.logRetentionDays, logs.RetentionDays.TWO_WEEKS);
  assert.deepEqual(props.existingDatabase, {
    secretArn: 'arn:aws:secretsmanager:us-east-1:123456789012:secret:db-AbC123',
    host: 'db.example',
  });
});

test('typed values from a cdk.json context block are taken as they are', () => {
  const context: Record<string, unknown> = { proxy: true, maxCapacity: 8, dbPoolMax: 3 };
  const { props } = propsFromContext((key) => context[key]);
  assert.equal(props.proxy, true);
  assert.equal(props.maxCapacity, 8);
  assert.equal(props.dbPoolMax, 3);
});

test('a bad value is refused with the name of its key, the value given and the values it takes', () => {
  const refused = (...args: string[]) => {
    try {
      fromArgs(...args);
    } catch (err) {
      assert.ok(err instanceof ContextError, String(err));
      return err.message;
    }
    return assert.fail(`${args.join(' ')} was accepted`);
  };
  assert.equal(
    refused('-c', 'proxy=perhaps'),
    'bad deploy setting (docs/deploy.md lists them all):\n  -c proxy=perhaps: proxy takes true or false',
  );
  assert.equal(
    refused('-c', 'nat=gatewya', '-c', 'minCapacity=0.3'),
    [
      'bad deploy settings (docs/deploy.md lists them all):',
      '  -c minCapacity=0.3: minCapacity takes ACUs from 0 to 256 in steps of 0.5 (0 lets Aurora pause)',
      '  -c nat=gatewya: nat takes gateway or instance',
    ].join('\n'),
  );
  assert.match(
    refused('-c', 'logRetentionDays=31'),
    /-c logRetentionDays=31: logRetentionDays takes one of 1, 3, 5, 7, 14, 30, 60,/,
  );
  // A field inside a JSON value is named, with our own words for it.
  assert.match(
    refused('-c', 'existingDatabase={"secretArn":"arn:aws:secretsmanager:x","host":"db"}'),
    /existingDatabase takes JSON: .*\(existingDatabase\.secretArn: must be the complete secret ARN/,
  );
  assert.match(
    refused('-c', 'existingVpc={not json'),
    /-c existingVpc=\{not json: existingVpc takes JSON/,
  );
  assert.match(
    refused('-c', 'publicUrl=https://ci.example.com/?x=1'),
    /publicUrl takes an https:\/\/ URL .*\(must have no query or fragment\)$/,
  );
  assert.equal(refused('-c', 'proxy'), '-c takes a setting as key=value, got "proxy"');
  // A cdk.json value is shown as JSON.
  assert.throws(
    () => propsFromContext((key) => (key === 'proxy' ? { on: true } : undefined)),
    /-c proxy=\{"on":true\}: proxy takes true or false/,
  );
});

test('every setting says what it takes', () => {
  for (const key of Object.keys(ContextSchema.shape)) {
    assert.ok(VALID_VALUES[key as keyof typeof VALID_VALUES], key);
  }
});

test('npm run synth with a bad setting prints the message alone, no stack trace, before bundling, and exits 1', () => {
  const out = mkdtempSync(join(tmpdir(), 'conductor-cdk-out-'));
  try {
    const run = spawnSync(
      process.execPath,
      ['--import', 'tsx', 'infra/app.ts', '-c', 'proxy=perhaps', '-c', 'nat=nope'],
      {
        cwd: ROOT,
        env: { ...process.env, CDK_OUTDIR: out },
        encoding: 'utf8',
        timeout: 60_000,
      },
    );
    assert.equal(run.status, 1, run.stderr);
    assert.equal(
      run.stderr,
      [
        'bad deploy settings (docs/deploy.md lists them all):',
        '  -c proxy=perhaps: proxy takes true or false',
        '  -c nat=nope: nat takes gateway or instance',
        '',
      ].join('\n'),
    );
    assert.equal(run.stdout, '');
  } finally {
    rmSync(out, { recursive: true, force: true });
  }
});
