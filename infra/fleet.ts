// Runners on Fargate for the `ecs` provider (lib/fleet/ecs.ts, docs/runner.md
// "Runner pools"): a cluster, the runner's task definition (the image built
// from Dockerfile.runner, or one given), its log group, the bucket of the
// launched runners' token files, and least-privilege IAM. Opt-in
// (`fargateRunners`); nothing here is billed while no runner runs (the image
// in ECR aside: cents a month).
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import {
  Duration,
  aws_ec2 as ec2,
  aws_ecr as ecr,
  aws_ecr_assets as ecrAssets,
  aws_ecs as ecs,
  IgnoreMode,
  aws_iam as iam,
  type aws_lambda as lambda,
  aws_logs as logs,
  RemovalPolicy,
  Stack,
  type aws_s3 as s3,
} from 'aws-cdk-lib';
import type { Construct } from 'constructs';
import { RUNNER_BUNDLE } from '../scripts/build-runner.ts';
import type { Network } from './network.ts';
import { privateBucket } from './storage.ts';

/** A runner task's size: 1 vCPU and 2 GiB (the smallest Fargate size that builds comfortably). */
export const RUNNER_TASK_SIZE = { cpu: 1024, memoryMiB: 2048 } as const;
/** The runner's container in the task definition (the ecs provider's `container` default). */
export const RUNNER_CONTAINER = 'runner';
/** Where the ecs provider writes token files (CONDUCTOR_RUNNER_TOKEN_PREFIX's default). */
export const RUNNER_TOKEN_PREFIX = 'runner-tokens/';

export interface RunnerFleetProps {
  network: Network;
  /** An image URI to run instead of building Dockerfile.runner (public, or in this account's ECR). */
  image?: string;
  /** The build context with Dockerfile.runner and dist/conductor-runner.mjs; default the repository. */
  imageDir: string;
  retention: logs.RetentionDays;
}

// <account>.dkr.ecr.<region>.amazonaws.com/<repository>[:tag|@digest]
const ECR_IMAGE = /^(\d{12})\.dkr\.ecr\.([a-z0-9-]+)\.amazonaws\.com(?:\.cn)?\/([^:@]+)/;

export class RunnerFleet {
  readonly cluster: ecs.Cluster;
  readonly taskDefinition: ecs.FargateTaskDefinition;
  readonly executionRole: iam.Role;
  readonly taskRole: iam.Role;
  readonly logGroup: logs.LogGroup;
  readonly tokenBucket: s3.Bucket;
  readonly securityGroup: ec2.SecurityGroup;
  /** The settings of an `ecs` pool that runs this task definition (the RunnerPoolSettings output). */
  readonly poolSettings: Record<string, unknown>;

  constructor(scope: Construct, props: RunnerFleetProps) {
    const stack = Stack.of(scope);
    const { vpc } = props.network;
    this.cluster = new ecs.Cluster(scope, 'RunnerCluster', { vpc });
    this.logGroup = new logs.LogGroup(scope, 'RunnerLogs', {
      retention: props.retention,
      removalPolicy: RemovalPolicy.DESTROY,
    });
    // Token files live a minute or so (the ecs provider deletes them once
    // ECS has read them); the rule is the backstop for a lost sweep.
    this.tokenBucket = privateBucket(scope, 'RunnerTokens', [
      { prefix: RUNNER_TOKEN_PREFIX, expiration: Duration.days(1) },
    ]);
    const tokenFiles = this.tokenBucket.arnForObjects(`${RUNNER_TOKEN_PREFIX}*`);

    // ECS's agent pulls the image, writes the logs and reads the token file
    // (an environment file) with this role; the runner never holds it.
    this.executionRole = new iam.Role(scope, 'RunnerExecutionRole', {
      assumedBy: new iam.ServicePrincipal('ecs-tasks.amazonaws.com'),
      description: 'Conductor runners: ECS pulls the image, writes logs, reads the token file',
    });
    this.executionRole.addToPolicy(
      new iam.PolicyStatement({ actions: ['s3:GetObject'], resources: [tokenFiles] }),
    );
    this.executionRole.addToPolicy(
      new iam.PolicyStatement({
        actions: ['s3:GetBucketLocation'],
        resources: [this.tokenBucket.bucketArn],
      }),
    );
    // The runner's own role: no permission at all. It talks to the control
    // plane with its worker token, never to AWS.
    this.taskRole = new iam.Role(scope, 'RunnerTaskRole', {
      assumedBy: new iam.ServicePrincipal('ecs-tasks.amazonaws.com'),
      description: 'Conductor runners: the runner itself (no AWS permission)',
    });

    this.taskDefinition = new ecs.FargateTaskDefinition(scope, 'RunnerTask', {
      family: `${stack.stackName}-runner`,
      cpu: RUNNER_TASK_SIZE.cpu,
      memoryLimitMiB: RUNNER_TASK_SIZE.memoryMiB,
      executionRole: this.executionRole,
      taskRole: this.taskRole,
      runtimePlatform: {
        cpuArchitecture: ecs.CpuArchitecture.X86_64,
        operatingSystemFamily: ecs.OperatingSystemFamily.LINUX,
      },
    });
    this.taskDefinition.addContainer('Runner', {
      containerName: RUNNER_CONTAINER,
      image: this.image(scope, props),
      essential: true,
      logging: ecs.LogDrivers.awsLogs({ streamPrefix: 'runner', logGroup: this.logGroup }),
    });

    // Runners call out (the control plane, the forges, registries) and take no calls.
    this.securityGroup = new ec2.SecurityGroup(scope, 'RunnerSecurityGroup', {
      vpc,
      description: 'Conductor runners: outbound only',
      allowAllOutbound: true,
    });
    this.poolSettings = {
      cluster: this.cluster.clusterName,
      task_definition: this.taskDefinition.family,
      subnets: vpc.selectSubnets(props.network.functionSubnets).subnetIds,
      security_groups: [this.securityGroup.securityGroupId],
      token_bucket: this.tokenBucket.bucketName,
      region: stack.region,
    };
  }

  private image(scope: Construct, props: RunnerFleetProps): ecs.ContainerImage {
    if (props.image) {
      const m = ECR_IMAGE.exec(props.image);
      if (!m) return ecs.ContainerImage.fromRegistry(props.image);
      // An ECR image: the execution role may pull from that repository alone.
      const repo = ecr.Repository.fromRepositoryAttributes(scope, 'RunnerImageRepository', {
        repositoryArn: `arn:${Stack.of(scope).partition}:ecr:${m[2]}:${m[1]}:repository/${m[3]}`,
        repositoryName: m[3]!,
      });
      repo.grantPull(this.executionRole);
      return ecs.ContainerImage.fromRegistry(props.image);
    }
    if (!existsSync(join(props.imageDir, RUNNER_BUNDLE))) {
      throw new Error(
        `no runner bundle at ${join(props.imageDir, RUNNER_BUNDLE)}: run npm run build-runner, or give runnerImage`,
      );
    }
    // Built by `cdk deploy` (Docker there, not at synth); the context is the
    // runner's bundle alone, as Dockerfile.runner.dockerignore says.
    const asset = new ecrAssets.DockerImageAsset(scope, 'RunnerImage', {
      directory: props.imageDir,
      file: 'Dockerfile.runner',
      exclude: ['*', `!${RUNNER_BUNDLE}`, '!Dockerfile.runner'],
      ignoreMode: IgnoreMode.DOCKER,
      platform: ecrAssets.Platform.LINUX_AMD64,
    });
    return ecs.ContainerImage.fromDockerImageAsset(asset);
  }

  /**
   * What a function that launches runners may do: run this task definition
   * (any revision) in this cluster alone, pass its two roles to ECS alone,
   * describe, stop and tag (at launch) the cluster's tasks, and write and
   * delete token files.
   */
  grantLaunch(fn: lambda.Function): void {
    const stack = Stack.of(this.cluster);
    const tasks = stack.formatArn({
      service: 'ecs',
      resource: 'task',
      resourceName: `${this.cluster.clusterName}/*`,
    });
    fn.addToRolePolicy(
      new iam.PolicyStatement({
        actions: ['ecs:RunTask'],
        resources: [
          stack.formatArn({
            service: 'ecs',
            resource: 'task-definition',
            resourceName: `${this.taskDefinition.family}:*`,
          }),
        ],
        conditions: { ArnEquals: { 'ecs:cluster': this.cluster.clusterArn } },
      }),
    );
    fn.addToRolePolicy(
      new iam.PolicyStatement({
        actions: ['iam:PassRole'],
        resources: [this.executionRole.roleArn, this.taskRole.roleArn],
        conditions: { StringEquals: { 'iam:PassedToService': 'ecs-tasks.amazonaws.com' } },
      }),
    );
    fn.addToRolePolicy(
      new iam.PolicyStatement({
        actions: ['ecs:DescribeTasks', 'ecs:StopTask'],
        resources: [tasks],
      }),
    );
    // RunTask's tags (the pool, the launch) need TagResource, at launch only.
    fn.addToRolePolicy(
      new iam.PolicyStatement({
        actions: ['ecs:TagResource'],
        resources: [tasks],
        conditions: { StringEquals: { 'ecs:CreateAction': 'RunTask' } },
      }),
    );
    fn.addToRolePolicy(
      new iam.PolicyStatement({
        actions: ['s3:PutObject', 's3:DeleteObject'],
        resources: [this.tokenBucket.arnForObjects(`${RUNNER_TOKEN_PREFIX}*`)],
      }),
    );
  }
}
