// One Lambda function per bundle: its log group, a role with what it uses and
// nothing else, Node.js 22 on arm64 in the VPC.
import { join } from 'node:path';
import {
  Duration,
  aws_iam as iam,
  aws_lambda as lambda,
  aws_logs as logs,
  RemovalPolicy,
  type aws_secretsmanager as secretsmanager,
} from 'aws-cdk-lib';
import type { Construct } from 'constructs';
import { type BundledFunction, FUNCTION_NAMES } from '../scripts/bundle.ts';
import type { Network } from './network.ts';

/** Every function the stack deploys (the bundles scripts/bundle.ts builds). */
export type ConductorFunction = BundledFunction;

interface FunctionSpec {
  description: string;
  memorySize: number;
  timeout: Duration;
}

// HTTP API integrations time out at 30 s; a handler past 25 s has lost anyway.
const HTTP: Omit<FunctionSpec, 'description'> = { memorySize: 512, timeout: Duration.seconds(25) };
const SPECS: Record<ConductorFunction, FunctionSpec> = {
  webhook: { ...HTTP, description: 'Forge webhooks: records jobs, dispatches compiles' },
  // A connect that waits out a resume (60 s), with time left to do the work.
  webhookQueue: {
    memorySize: 512,
    timeout: Duration.seconds(90),
    description: 'Webhook deliveries queued while the database resumed',
  },
  claim: { ...HTTP, description: 'Runner: claim a task' },
  heartbeat: { ...HTTP, description: 'Runner: extend a lease' },
  logs: { ...HTTP, description: 'Runner: append a log chunk' },
  complete: { ...HTTP, description: 'Runner: report an outcome' },
  api: { ...HTTP, description: 'Admin API, health, and the JSON 404' },
  // Reading the pipeline file from the forge and compiling it.
  compile: { memorySize: 1024, timeout: Duration.seconds(60), description: 'Compile a job' },
  // Shorter than the default one-minute interval, so sweeps rarely overlap
  // (they may: each repair re-checks its row).
  sweep: { memorySize: 512, timeout: Duration.seconds(55), description: 'Sweep: leases, repairs' },
  // The push channel's $connect/$disconnect/$default: a ticket's signature
  // checked, an object written or deleted; never the database.
  channel: { ...HTTP, description: 'Push channel: WebSocket connects and disconnects' },
  migrate: {
    memorySize: 512,
    timeout: Duration.minutes(5),
    description: 'Apply the migrations (a custom resource, on every deploy)',
  },
};

export const pascal = (name: string) => name[0]!.toUpperCase() + name.slice(1);

/**
 * Most concurrent containers of each function. Each holds up to
 * CONDUCTOR_DB_POOL_MAX connections, so the sum of these times the pool size
 * stays under the database's max_connections (the stack checks it); the
 * sweep runs alone.
 */
export const RESERVED_CONCURRENCY: Record<ConductorFunction, number> = {
  claim: 40,
  complete: 40,
  heartbeat: 20,
  logs: 20,
  webhook: 10,
  webhookQueue: 2,
  api: 10,
  compile: 10,
  sweep: 1,
  migrate: 1,
  // Opens no database connection (the stack leaves it out of the sum); a
  // $connect throttled past this is a runner that polls a while longer.
  channel: 20,
};

/** The functions that never open a database connection: no rds-db:connect, no database secret. */
export const DATABASE_FREE: readonly ConductorFunction[] = ['channel'];

export interface FunctionsProps {
  bundleDir: string;
  /** Every function's environment, and each one's own additions. */
  environment: Record<string, string>;
  environmentOf: (name: ConductorFunction) => Record<string, string>;
  /** The secrets each function reads at cold start (none: no statement). */
  secretsOf: (name: ConductorFunction) => secretsmanager.ISecret[];
  /** Reserve concurrency per function (RESERVED_CONCURRENCY). */
  reserveConcurrency: boolean;
  retention: logs.RetentionDays;
  /** The VPC the functions run in; none: outside any VPC. */
  network?: Network;
}

/** Every function of the stack, by name. */
export class Functions {
  readonly byName: Record<ConductorFunction, lambda.Function>;

  constructor(scope: Construct, props: FunctionsProps) {
    // lib/context.ts reads the secrets at cold start through this extension
    // (a local HTTP endpoint with a cache), so no function bundles the SDK for it.
    const paramsAndSecrets = lambda.ParamsAndSecretsLayerVersion.fromVersion(
      lambda.ParamsAndSecretsVersions.V1_0_103,
      { logLevel: lambda.ParamsAndSecretsLogLevel.WARN },
    );
    const byName = {} as Record<ConductorFunction, lambda.Function>;
    for (const name of FUNCTION_NAMES) {
      byName[name] = createFunction(scope, name, props, paramsAndSecrets);
    }
    this.byName = byName;
  }
}

function createFunction(
  scope: Construct,
  name: ConductorFunction,
  props: FunctionsProps,
  paramsAndSecrets: lambda.ParamsAndSecretsLayerVersion,
): lambda.Function {
  const id = pascal(name);
  const spec = SPECS[name];
  const logGroup = new logs.LogGroup(scope, `${id}Logs`, {
    retention: props.retention,
    removalPolicy: RemovalPolicy.DESTROY,
  });
  // A role per function, with what that function uses and nothing else
  // (no AWS managed policies: they grant logs on every group).
  const role = new iam.Role(scope, `${id}Role`, {
    assumedBy: new iam.ServicePrincipal('lambda.amazonaws.com'),
    description: `Conductor ${name} function`,
  });
  role.addToPolicy(
    new iam.PolicyStatement({
      sid: 'WriteOwnLogs',
      actions: ['logs:CreateLogStream', 'logs:PutLogEvents'],
      resources: [logGroup.logGroupArn],
    }),
  );
  if (props.network) {
    role.addToPolicy(
      new iam.PolicyStatement({
        // What Lambda needs to attach the function to the VPC; these actions
        // take no resource-level permissions.
        sid: 'VpcNetworkInterfaces',
        actions: [
          'ec2:CreateNetworkInterface',
          'ec2:DescribeNetworkInterfaces',
          'ec2:DescribeSubnets',
          'ec2:DeleteNetworkInterface',
          'ec2:AssignPrivateIpAddresses',
          'ec2:UnassignPrivateIpAddresses',
        ],
        resources: ['*'],
      }),
    );
  }
  const secrets = props.secretsOf(name);
  if (secrets.length > 0) {
    role.addToPolicy(
      new iam.PolicyStatement({
        sid: 'ReadConductorSecrets',
        actions: ['secretsmanager:GetSecretValue'],
        resources: secrets.map((s) => s.secretArn),
      }),
    );
  }
  return new lambda.Function(scope, `${id}Function`, {
    description: `Conductor: ${spec.description}`,
    runtime: lambda.Runtime.NODEJS_22_X,
    architecture: lambda.Architecture.ARM_64,
    handler: 'index.handler',
    code: lambda.Code.fromAsset(join(props.bundleDir, name)),
    memorySize: spec.memorySize,
    timeout: spec.timeout,
    role,
    logGroup,
    // JSON logs, and the platform's own lines (START, END, REPORT) only at
    // WARN: an idle runner's poll then writes no log at all, which the idle
    // bill counts on (infra/cost.ts). The application's lines are JSON already.
    loggingFormat: lambda.LoggingFormat.JSON,
    systemLogLevelV2: lambda.SystemLogLevel.WARN,
    applicationLogLevelV2: lambda.ApplicationLogLevel.INFO,
    environment: { ...props.environment, ...props.environmentOf(name) },
    reservedConcurrentExecutions: props.reserveConcurrency ? RESERVED_CONCURRENCY[name] : undefined,
    paramsAndSecrets,
    ...(props.network
      ? {
          vpc: props.network.vpc,
          vpcSubnets: props.network.functionSubnets,
          securityGroups: [props.network.functionsSecurityGroup],
        }
      : {}),
  });
}
