// The Fargate runners of `fargateRunners` (infra/fleet.ts): the cluster, the
// task definition, the log group, the token files' bucket, and IAM that lets
// the launching functions do what the ecs provider does and nothing more.
// Synthesis needs no Docker: the image asset is only staged (its build
// context a stand-in: Dockerfile.runner and a one-line runner bundle).
import assert from 'node:assert/strict';
import { copyFileSync, mkdirSync, mkdtempSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, test } from 'node:test';
import { type App, aws_ecr_assets as ecrAssets, type aws_iam as iam } from 'aws-cdk-lib';
import { contextFromArgs, propsFromContext } from '../../infra/context.ts';
import { RUNNER_LAUNCHERS } from '../../infra/stack.ts';
import { EcsSettingsSchema } from '../../lib/fleet/ecs.ts';
import {
  asList,
  EXISTING_RESOURCES,
  logicalId,
  policyStatements,
  type Resource,
  resourcesOf,
  type Statement,
  type Synthesised,
  stubBundles,
  synth,
  validatedSynth,
} from './support.ts';

const bundles = stubBundles();
const imageDir = mkdtempSync(join(tmpdir(), 'conductor-runner-image-'));
after(() => rmSync(imageDir, { recursive: true, force: true }));
copyFileSync(
  new URL('../../Dockerfile.runner', import.meta.url),
  join(imageDir, 'Dockerfile.runner'),
);
mkdirSync(join(imageDir, 'dist'));
writeFileSync(join(imageDir, 'dist', 'conductor-runner.mjs'), '// stand-in\n');
// What the build context must leave out.
mkdirSync(join(imageDir, 'node_modules'));
writeFileSync(join(imageDir, 'node_modules', 'left-out.js'), '\n');
mkdirSync(join(imageDir, '.conductor'));
writeFileSync(join(imageDir, '.conductor', 'secret.key'), 'not for the image\n');
mkdirSync(join(imageDir, 'dist', 'functions'));
writeFileSync(join(imageDir, 'dist', 'functions', 'index.mjs'), '\n');

const byDefault = synth(bundles);
const fleet = synth(bundles, { fargateRunners: true, runnerImageDir: imageDir });

const only = (s: Synthesised, type: string): [string, Resource] => {
  const found = resourcesOf(s.json, type);
  assert.equal(found.length, 1, type);
  return found[0]!;
};
const roleId = (s: Synthesised, role: iam.IRole) => logicalId(s.stack, role as iam.Role);
const actionsOf = (st: Statement) => asList(st.Action);
const ecsOrPass = (st: Statement) =>
  actionsOf(st).some((a) => a.startsWith('ecs:') || a === 'iam:PassRole');
const json = (v: unknown) => JSON.stringify(v);

test('without fargateRunners the stack has no cluster, task definition or runner IAM, and no RunnerPoolSettings output', () => {
  for (const type of ['AWS::ECS::Cluster', 'AWS::ECS::TaskDefinition']) {
    assert.equal(resourcesOf(byDefault.json, type).length, 0, type);
  }
  assert.ok(!policyStatements(byDefault.json).some((p) => ecsOrPass(p.statement)));
  const outputs = (byDefault.template.toJSON() as { Outputs: Record<string, unknown> }).Outputs;
  assert.ok(!('RunnerPoolSettings' in outputs));
});

test('the task definition runs the runner image on Fargate in awsvpc at 1 vCPU and 2 GiB, logging to its own log group', () => {
  const [, cluster] = only(fleet, 'AWS::ECS::Cluster');
  assert.equal(cluster.Properties.ClusterSettings, undefined, 'no Container Insights (billed)');
  const [, td] = only(fleet, 'AWS::ECS::TaskDefinition');
  const p = td.Properties as Record<string, unknown>;
  assert.deepEqual(p.RequiresCompatibilities, ['FARGATE']);
  assert.equal(p.NetworkMode, 'awsvpc');
  assert.equal(p.Cpu, '1024');
  assert.equal(p.Memory, '2048');
  assert.equal(p.Family, 'Conductor-runner');
  const exec = roleId(fleet, fleet.stack.runnerFleet!.executionRole);
  const task = roleId(fleet, fleet.stack.runnerFleet!.taskRole);
  assert.deepEqual(p.ExecutionRoleArn, { 'Fn::GetAtt': [exec, 'Arn'] });
  assert.deepEqual(p.TaskRoleArn, { 'Fn::GetAtt': [task, 'Arn'] });
  const [container] = p.ContainerDefinitions as Record<string, unknown>[];
  assert.equal(container!.Name, 'runner');
  assert.equal(container!.Essential, true);
  assert.equal(container!.Environment, undefined, 'no variable baked into the task definition');
  // The image is the asset built from Dockerfile.runner, in the bootstrap's ECR repository.
  assert.match(json(container!.Image), /cdk-hnb659fds-container-assets-/);
  const logId = logicalId(fleet.stack, fleet.stack.runnerFleet!.logGroup);
  assert.equal(fleet.json.Resources[logId]!.Properties.RetentionInDays, 30);
  const log = container!.LogConfiguration as {
    LogDriver: string;
    Options: Record<string, unknown>;
  };
  assert.equal(log.LogDriver, 'awslogs');
  assert.deepEqual(log.Options['awslogs-group'], { Ref: logId });
  assert.equal(log.Options['awslogs-stream-prefix'], 'runner');
});

test('the image asset is staged from Dockerfile.runner with the runner bundle alone as its context', () => {
  const assets = fleet.stack.node
    .findAll()
    .filter((c): c is ecrAssets.DockerImageAsset => c instanceof ecrAssets.DockerImageAsset);
  assert.equal(assets.length, 1);
  // Staged at synth (no Docker): the Dockerfile and the bundle, not the
  // rest of the repository (node_modules, a local stack's keys).
  const outdir = (fleet.stack.node.root as App).outdir;
  const staged = readdirSync(join(outdir, `asset.${assets[0]!.assetHash}`), {
    recursive: true,
  }).map(String);
  assert.deepEqual(staged.sort(), ['Dockerfile.runner', 'dist', 'dist/conductor-runner.mjs']);
  const emptyDir = mkdtempSync(join(tmpdir(), 'conductor-no-runner-'));
  after(() => rmSync(emptyDir, { recursive: true, force: true }));
  assert.throws(
    () =>
      synth(bundles, {
        fargateRunners: true,
        runnerImageDir: emptyDir,
      }),
    /no runner bundle at .*dist\/conductor-runner\.mjs: run npm run build-runner, or give runnerImage/,
  );
  assert.throws(
    () =>
      synth(bundles, {
        fargateRunners: true,
        outsideVpc: true,
        existingDatabase: EXISTING_RESOURCES.existingDatabase,
      }),
    /fargateRunners needs a VPC/,
  );
});

test('the launching functions may run only this task definition in this cluster, pass only its two roles to ECS, and describe, stop and tag only its tasks', () => {
  const rf = fleet.stack.runnerFleet!;
  const clusterId = logicalId(fleet.stack, rf.cluster);
  const launchers = new Set(
    RUNNER_LAUNCHERS.map((n) => roleId(fleet, fleet.stack.functions[n].role!)),
  );
  const granted = policyStatements(fleet.json).filter((p) => ecsOrPass(p.statement));
  // No other role, no wildcard resource.
  for (const { roles, statement } of granted) {
    assert.ok(
      roles.every((r) => launchers.has(r)),
      `${json(statement)} on ${roles}`,
    );
    assert.ok(!asList(statement.Resource).includes('*'), json(statement));
  }
  for (const launcher of launchers) {
    const mine = granted.filter((p) => p.roles.includes(launcher)).map((p) => p.statement);
    const find = (action: string) => {
      const found = mine.filter((s) => actionsOf(s).includes(action));
      assert.equal(found.length, 1, `${action} for ${launcher}`);
      return found[0]! as Statement & { Condition?: Record<string, Record<string, unknown>> };
    };
    const run = find('ecs:RunTask');
    assert.deepEqual(actionsOf(run), ['ecs:RunTask']);
    assert.match(json(run.Resource), /:task-definition\/Conductor-runner:\*"/);
    assert.deepEqual(run.Condition, {
      ArnEquals: { 'ecs:cluster': { 'Fn::GetAtt': [clusterId, 'Arn'] } },
    });
    const pass = find('iam:PassRole');
    assert.deepEqual(
      asList(pass.Resource),
      [rf.executionRole, rf.taskRole].map((r) => ({ 'Fn::GetAtt': [roleId(fleet, r), 'Arn'] })),
    );
    assert.deepEqual(pass.Condition, {
      StringEquals: { 'iam:PassedToService': 'ecs-tasks.amazonaws.com' },
    });
    const describe = find('ecs:DescribeTasks');
    assert.deepEqual(actionsOf(describe).sort(), ['ecs:DescribeTasks', 'ecs:StopTask']);
    assert.match(json(describe.Resource), new RegExp(`:task/",\\{"Ref":"${clusterId}"\\},"/\\*"`));
    const tag = find('ecs:TagResource');
    assert.deepEqual(tag.Condition, { StringEquals: { 'ecs:CreateAction': 'RunTask' } });
    assert.deepEqual(tag.Resource, describe.Resource);
  }
  // The token files: written and deleted by the launchers, under their prefix only.
  const bucketId = logicalId(fleet.stack, rf.tokenBucket);
  const tokenWrites = policyStatements(fleet.json).filter(
    (p) => json(p.statement.Resource).includes(bucketId) && p.roles.some((r) => launchers.has(r)),
  );
  assert.equal(tokenWrites.length, 2);
  for (const { statement } of tokenWrites) {
    assert.deepEqual(actionsOf(statement).sort(), ['s3:DeleteObject', 's3:PutObject']);
    assert.match(json(statement.Resource), /"\/runner-tokens\/\*"/);
  }
});

test("ECS reads a token file with the execution role, which reads nothing else of the bucket; the runner's own role has no permission", () => {
  const rf = fleet.stack.runnerFleet!;
  const bucketId = logicalId(fleet.stack, rf.tokenBucket);
  const exec = roleId(fleet, rf.executionRole);
  const onBucket = policyStatements(fleet.json)
    .filter((p) => json(p.statement.Resource).includes(bucketId))
    .filter((p) => p.roles.includes(exec));
  assert.deepEqual(
    onBucket.map((p) => [actionsOf(p.statement), json(p.statement.Resource)]),
    [
      [
        ['s3:GetObject'],
        json({ 'Fn::Join': ['', [{ 'Fn::GetAtt': [bucketId, 'Arn'] }, '/runner-tokens/*']] }),
      ],
      [['s3:GetBucketLocation'], json({ 'Fn::GetAtt': [bucketId, 'Arn'] })],
    ],
  );
  const task = roleId(fleet, rf.taskRole);
  assert.deepEqual(
    policyStatements(fleet.json).filter((p) => p.roles.includes(task)),
    [],
  );
  // The bucket: private, TLS only, token files expire after a day.
  const bucket = fleet.json.Resources[bucketId]!.Properties as Record<string, unknown>;
  assert.deepEqual(bucket.PublicAccessBlockConfiguration, {
    BlockPublicAcls: true,
    BlockPublicPolicy: true,
    IgnorePublicAcls: true,
    RestrictPublicBuckets: true,
  });
  assert.match(
    json(bucket.LifecycleConfiguration),
    /"ExpirationInDays":1,"Prefix":"runner-tokens\/"/,
  );
});

test('RunnerPoolSettings is an ecs pool settings object: the cluster, the family, the private subnets, the runners security group, the bucket', () => {
  const outputs = (fleet.template.toJSON() as { Outputs: Record<string, { Value: unknown }> })
    .Outputs;
  const value = json(outputs.RunnerPoolSettings!.Value);
  const rf = fleet.stack.runnerFleet!;
  for (const id of [
    logicalId(fleet.stack, rf.cluster),
    logicalId(fleet.stack, rf.securityGroup),
    logicalId(fleet.stack, rf.tokenBucket),
  ]) {
    assert.ok(value.includes(`"${id}"`), id);
  }
  assert.match(value, /task_definition\\":\\"Conductor-runner/);
  // With the tokens filled in, the object passes the provider's own schema.
  const filled = {
    ...rf.poolSettings,
    cluster: 'c',
    subnets: ['subnet-1'],
    security_groups: ['sg-1'],
    token_bucket: 'bucket',
    region: 'eu-west-1',
  };
  assert.ok(EcsSettingsSchema.safeParse(filled).success);
  assert.deepEqual(Object.keys(rf.poolSettings).sort(), Object.keys(filled).sort());
});

test('runnerImage runs that image, without an image asset; from ECR, the execution role may pull that repository alone', () => {
  const uri = '123456789012.dkr.ecr.eu-west-1.amazonaws.com/conductor-runner:7';
  const given = synth(bundles, { fargateRunners: true, runnerImage: uri });
  const [, td] = only(given, 'AWS::ECS::TaskDefinition');
  const [container] = td.Properties.ContainerDefinitions as { Image: unknown }[];
  assert.equal(container!.Image, uri);
  assert.ok(
    !given.stack.node.findAll().some((c) => c instanceof ecrAssets.DockerImageAsset),
    'nothing to build',
  );
  const exec = roleId(given, given.stack.runnerFleet!.executionRole);
  const pulls = policyStatements(given.json).filter(
    (p) => p.roles.includes(exec) && actionsOf(p.statement).includes('ecr:BatchGetImage'),
  );
  assert.equal(pulls.length, 1);
  assert.equal(
    json(pulls[0]!.statement.Resource),
    json({
      'Fn::Join': [
        '',
        [
          'arn:',
          { Ref: 'AWS::Partition' },
          ':ecr:eu-west-1:123456789012:repository/conductor-runner',
        ],
      ],
    }),
  );
  const publicImage = synth(bundles, {
    fargateRunners: true,
    runnerImage: 'ghcr.io/acme/runner:1',
  });
  const [, td2] = only(publicImage, 'AWS::ECS::TaskDefinition');
  assert.equal(
    (td2.Properties.ContainerDefinitions as { Image: unknown }[])[0]!.Image,
    'ghcr.io/acme/runner:1',
  );
});

test('fargateRunners and runnerImage are deploy settings; a bad image reference is refused naming the setting', () => {
  const fromArgs = (...args: string[]) => {
    const context = contextFromArgs(args);
    return propsFromContext((key) => context[key]).props;
  };
  const props = fromArgs('-c', 'fargateRunners=true', '-c', 'runnerImage=ghcr.io/acme/runner:1');
  assert.equal(props.fargateRunners, true);
  assert.equal(props.runnerImage, 'ghcr.io/acme/runner:1');
  assert.equal(fromArgs().fargateRunners, undefined);
  assert.throws(() => fromArgs('-c', 'runnerImage=not an image'), /runnerImage/);
});

test("with fargateRunners the stack passes synthesis' CloudFormation schema check", () => {
  const found = validatedSynth(bundles, { fargateRunners: true, runnerImageDir: imageDir });
  assert.deepEqual(found.violations, []);
});
