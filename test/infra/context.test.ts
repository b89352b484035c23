import assert from 'node:assert/strict';
import { test } from 'node:test';
import { aws_logs as logs } from 'aws-cdk-lib';
import { contextFromArgs, propsFromContext } from '../../infra/context.ts';

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

test('a bad value is refused with the name of its key', () => {
  assert.throws(() => fromArgs('-c', 'proxy=perhaps'), /proxy/);
  assert.throws(() => fromArgs('-c', 'minCapacity=0.3'), /minCapacity/);
  assert.throws(() => fromArgs('-c', 'logRetentionDays=31'), /logRetentionDays: must be one of/);
  assert.throws(
    () => fromArgs('-c', 'existingDatabase={"secretArn":"arn:aws:secretsmanager:x","host":"db"}'),
    /existingDatabase.*complete secret ARN/,
  );
  assert.throws(() => fromArgs('-c', 'existingVpc={not json'), /existingVpc/);
  assert.throws(() => fromArgs('-c', 'proxy'), /key=value/);
});

test('publicUrl is an https URL without query or fragment, for the job links in commit statuses', () => {
  assert.equal(
    fromArgs('-c', 'publicUrl=https://ci.example').props.publicUrl,
    'https://ci.example',
  );
  assert.equal(
    fromArgs('-c', 'publicUrl=https://example.com/ci/').props.publicUrl,
    'https://example.com/ci/',
  );
  // Signed links over plain http would show their signature to the network.
  assert.throws(
    () => fromArgs('-c', 'publicUrl=http://ci.example'),
    /publicUrl\b[\s\S]*must be an https:\/\/ URL/,
  );
  assert.throws(() => fromArgs('-c', 'publicUrl=ci.example'), /publicUrl/);
  assert.throws(
    () => fromArgs('-c', 'publicUrl=https://ci.example/?a=1'),
    /publicUrl\b[\s\S]*must have no query/,
  );
});

test('one of the throttle settings alone keeps the default of the other', () => {
  assert.deepEqual(fromArgs('-c', 'throttleRate=10').props.throttle, { rate: 10, burst: 100 });
  assert.deepEqual(fromArgs('-c', 'throttleBurst=7').props.throttle, { rate: 50, burst: 7 });
});
