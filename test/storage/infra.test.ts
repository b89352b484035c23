// The artifacts bucket in the CDK app: private, TLS only, encrypted, with
// lifecycle rules; only the api function (presigning) and the sweep
// (retention) reach its objects, and they are told its name.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { Match } from 'aws-cdk-lib/assertions';
import { asList, logicalId, policyStatements, stubBundles, synth } from '../infra/support.ts';

const s = synth(stubBundles());
const bucket = logicalId(s.stack, s.stack.artifactsBucket);

test('the artifacts bucket blocks public access, is encrypted, expires objects and aborts stale uploads', () => {
  const props = s.json.Resources[bucket]!.Properties as Record<string, unknown>;
  assert.deepEqual(props.PublicAccessBlockConfiguration, {
    BlockPublicAcls: true,
    BlockPublicPolicy: true,
    IgnorePublicAcls: true,
    RestrictPublicBuckets: true,
  });
  assert.ok(JSON.stringify(props.BucketEncryption).includes('AES256'));
  const rules = (props.LifecycleConfiguration as { Rules: Record<string, unknown>[] }).Rules;
  assert.ok(
    rules.some(
      (r) =>
        (r.AbortIncompleteMultipartUpload as { DaysAfterInitiation?: number })
          ?.DaysAfterInitiation === 1,
    ),
  );
  assert.ok(rules.some((r) => r.ExpirationInDays === 401));
});

test('the bucket policy refuses every request without TLS', () => {
  s.template.hasResourceProperties('AWS::S3::BucketPolicy', {
    Bucket: { Ref: bucket },
    PolicyDocument: {
      Statement: Match.arrayWith([
        Match.objectLike({
          Effect: 'Deny',
          Condition: { Bool: { 'aws:SecureTransport': 'false' } },
        }),
      ]),
    },
  });
});

test('only api and sweep reach its objects, each with its own actions, and know its name', () => {
  const roleOf = new Map<string, string>();
  for (const [name, fn] of Object.entries(s.stack.functions)) {
    const role = (
      s.json.Resources[logicalId(s.stack, fn)]!.Properties.Role as { 'Fn::GetAtt': string[] }
    )['Fn::GetAtt'][0]!;
    roleOf.set(role, name);
  }
  const reaching = new Map<string, string[]>();
  for (const { roles, statement } of policyStatements(s.json)) {
    if (!JSON.stringify(statement.Resource).includes(bucket)) continue;
    if (statement.Effect !== 'Allow') continue;
    for (const role of roles) {
      const name = roleOf.get(role);
      if (name) reaching.set(name, [...(reaching.get(name) ?? []), ...asList(statement.Action)]);
    }
  }
  assert.deepEqual([...reaching.keys()].sort(), ['api', 'sweep']);
  assert.deepEqual(reaching.get('sweep'), ['s3:DeleteObject']);
  assert.ok(reaching.get('api')!.includes('s3:PutObject'));
  for (const name of ['api', 'sweep'] as const) {
    const fn = s.json.Resources[logicalId(s.stack, s.stack.functions[name])]!;
    const env = (fn.Properties.Environment as { Variables: Record<string, unknown> }).Variables;
    assert.deepEqual(env.CONDUCTOR_ARTIFACTS_BUCKET, { Ref: bucket });
  }
});
