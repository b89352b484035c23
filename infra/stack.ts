// The Conductor deployment: one Lambda per function behind an HTTP API whose
// routes come from lib/http/routes.ts, the sweep on an EventBridge schedule,
// Aurora PostgreSQL Serverless v2 behind RDS Proxy, the secrets in Secrets
// Manager, migrations applied on deploy, alarms. Synthesises offline: no
// context lookups, no Docker (the functions are bundled by scripts/bundle.ts).
import { createHash } from 'node:crypto';
import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import {
  Annotations,
  aws_apigatewayv2 as apigwv2,
  aws_apigatewayv2_integrations as apigwv2Integrations,
  CfnOutput,
  CustomResource,
  aws_cloudwatch as cloudwatch,
  aws_cloudwatch_actions as cloudwatchActions,
  Duration,
  aws_lambda_destinations as destinations,
  aws_ec2 as ec2,
  aws_events as events,
  aws_events_targets as eventsTargets,
  aws_iam as iam,
  aws_lambda as lambda,
  aws_logs as logs,
  RemovalPolicy,
  aws_rds as rds,
  Stack,
  type StackProps,
  aws_secretsmanager as secretsmanager,
  aws_sns as sns,
  aws_sqs as sqs,
  aws_sns_subscriptions as subscriptions,
  Tags,
} from 'aws-cdk-lib';
import type { Construct } from 'constructs';
import { ROUTES, type FunctionName as RoutedFunction, routeKey } from '../lib/http/routes.ts';
import {
  type BundledFunction,
  DEFAULT_OUTDIR,
  FUNCTION_NAMES,
  MIGRATIONS_HASH_FILE,
} from '../scripts/bundle.ts';

/** Every function the stack deploys (the bundles scripts/bundle.ts builds). */
export type ConductorFunction = BundledFunction;
export { FUNCTION_NAMES };

/** The functions allowed to invoke compile (and told its name). */
export const COMPILE_INVOKERS = ['webhook', 'api', 'sweep'] as const satisfies ConductorFunction[];

export const DB_NAME = 'conductor';
const DB_PORT = 5432;
const DB_USER = 'conductor';
const DEFAULT_POSTGRES_VERSION = '16.11';

/** An existing VPC, given by ids so that synthesis looks nothing up. */
export interface ExistingVpc {
  vpcId: string;
  /** The availability zones of the subnets, in the same order. */
  availabilityZones: string[];
  /** Private subnets with a route to the internet (NAT): the functions and the proxy run here. */
  privateSubnetIds: string[];
  /** Subnets for the database; default: the private subnets. */
  isolatedSubnetIds?: string[];
}

/** An existing PostgreSQL (15 or newer) instead of the Aurora cluster. */
export interface ExistingDatabase {
  /** The complete ARN of a Secrets Manager secret: JSON with username, password, host, port, dbname. */
  secretArn: string;
  /** The host the functions connect to (the database's, or a proxy's, endpoint). */
  host: string;
  /** Default: conductor. */
  dbName?: string;
  /** The database's security group: the stack lets the functions' group in on `port`. */
  securityGroupId?: string;
  /** Default: 5432. */
  port?: number;
}

export interface ConductorStackProps extends StackProps {
  /** Where scripts/bundle.ts wrote `<name>/index.mjs`; default dist/functions. */
  bundleDir?: string;
  /** How often the sweep runs; default one minute. */
  sweepInterval?: Duration;
  /** Aurora Serverless v2 minimum ACUs; default 0.5. 0 turns on auto-pause (see docs/deploy.md). */
  minCapacity?: number;
  /** Aurora Serverless v2 maximum ACUs; default 4. */
  maxCapacity?: number;
  /** Idle time before a 0-ACU instance pauses (5 minutes to 1 day); default 5 minutes. */
  autoPauseAfter?: Duration;
  /** Aurora PostgreSQL version (15 or 16); default 16.11. */
  postgresVersion?: string;
  /** Put RDS Proxy between the functions and Aurora; default true. */
  proxy?: boolean;
  /** Refuse to delete the cluster; default true. */
  deletionProtection?: boolean;
  /** Use this VPC instead of creating one. */
  existingVpc?: ExistingVpc;
  /** Use this database instead of creating Aurora (and RDS Proxy). */
  existingDatabase?: ExistingDatabase;
  /** A created VPC's way out to the forges: a NAT gateway (default) or a t4g.nano NAT instance. */
  nat?: 'gateway' | 'instance';
  /** CONDUCTOR_GITHUB_API_URL; default https://api.github.com. */
  githubApiUrl?: string;
  /** CONDUCTOR_LEASE_S; default 45 (docs/scheduling.md, "Lost runners"). */
  leaseSeconds?: number;
  /** CONDUCTOR_DB_POOL_MAX, connections per Lambda container; default 2. */
  dbPoolMax?: number;
  /** Days the functions' logs are kept; default 30. */
  logRetentionDays?: logs.RetentionDays;
  /** An address that receives the alarms (it must confirm the subscription). */
  alarmEmail?: string;
}

interface FunctionSpec {
  description: string;
  memorySize: number;
  timeout: Duration;
}

// HTTP API integrations time out at 30 s; a handler past 25 s has lost anyway.
const HTTP: Omit<FunctionSpec, 'description'> = { memorySize: 512, timeout: Duration.seconds(25) };
const SPECS: Record<ConductorFunction, FunctionSpec> = {
  webhook: { ...HTTP, description: 'Forge webhooks: records jobs, dispatches compiles' },
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
  migrate: {
    memorySize: 512,
    timeout: Duration.minutes(5),
    description: 'Apply the migrations (a custom resource, on every deploy)',
  },
};

const pascal = (name: string) => name[0]!.toUpperCase() + name.slice(1);

export class ConductorStack extends Stack {
  readonly functions: Record<ConductorFunction, lambda.Function>;
  readonly httpApi: apigwv2.HttpApi;
  readonly functionsSecurityGroup: ec2.SecurityGroup;
  readonly appSecret: secretsmanager.Secret;
  readonly dbSecret: secretsmanager.ISecret;
  readonly cluster?: rds.DatabaseCluster;
  readonly proxy?: rds.DatabaseProxy;
  readonly compileFailures: sqs.Queue;
  readonly alarmTopic: sns.Topic;

  constructor(scope: Construct, id: string, props: ConductorStackProps = {}) {
    super(scope, id, props);
    Tags.of(this).add('app', 'conductor');
    const bundleDir = props.bundleDir ?? DEFAULT_OUTDIR;
    for (const name of FUNCTION_NAMES) {
      if (!existsSync(join(bundleDir, name, 'index.mjs'))) {
        throw new Error(`no bundle at ${join(bundleDir, name, 'index.mjs')}: run npm run bundle`);
      }
    }

    // --- Network -------------------------------------------------------------
    const vpc = props.existingVpc
      ? ec2.Vpc.fromVpcAttributes(this, 'Vpc', {
          vpcId: props.existingVpc.vpcId,
          availabilityZones: props.existingVpc.availabilityZones,
          privateSubnetIds: props.existingVpc.privateSubnetIds,
          isolatedSubnetIds: props.existingVpc.isolatedSubnetIds,
        })
      : this.createVpc(props.nat ?? 'gateway');
    const functionSubnets: ec2.SubnetSelection = { subnetType: ec2.SubnetType.PRIVATE_WITH_EGRESS };
    const databaseSubnets: ec2.SubnetSelection =
      !props.existingVpc || props.existingVpc.isolatedSubnetIds?.length
        ? { subnetType: ec2.SubnetType.PRIVATE_ISOLATED }
        : functionSubnets;

    // Every function shares one group; the database (or the proxy) lets in
    // this group and nothing else. Outbound is open: the forges (a Gitea on
    // any port), Secrets Manager and Lambda are reached through the NAT.
    this.functionsSecurityGroup = new ec2.SecurityGroup(this, 'FunctionsSecurityGroup', {
      vpc,
      description: 'Conductor functions',
      allowAllOutbound: true,
    });

    // --- Secrets -------------------------------------------------------------
    this.appSecret = this.createAppSecret();

    // --- Database ------------------------------------------------------------
    let dbHost: string;
    let dbName = DB_NAME;
    const dependsOnDatabase: Construct[] = [];
    if (props.existingDatabase) {
      const existing = props.existingDatabase;
      this.dbSecret = secretsmanager.Secret.fromSecretCompleteArn(
        this,
        'DatabaseSecret',
        existing.secretArn,
      );
      dbHost = existing.host;
      dbName = existing.dbName ?? DB_NAME;
      if (existing.securityGroupId) {
        const group = ec2.SecurityGroup.fromSecurityGroupId(
          this,
          'DatabaseSecurityGroup',
          existing.securityGroupId,
        );
        group.addIngressRule(
          this.functionsSecurityGroup,
          ec2.Port.tcp(existing.port ?? DB_PORT),
          'Conductor functions',
        );
      }
    } else {
      const db = this.createDatabase(vpc, databaseSubnets, functionSubnets, props);
      this.cluster = db.cluster;
      this.proxy = db.proxy;
      this.dbSecret = db.cluster.secret!;
      dbHost = db.proxy ? db.proxy.endpoint : db.cluster.clusterEndpoint.hostname;
      dependsOnDatabase.push(db.cluster);
      if (db.proxy) dependsOnDatabase.push(db.proxy);
    }

    // --- Functions -----------------------------------------------------------
    const environment: Record<string, string> = {
      NODE_OPTIONS: '--enable-source-maps',
      CONDUCTOR_DB_SECRET_ARN: this.dbSecret.secretArn,
      CONDUCTOR_DB_HOST: dbHost,
      CONDUCTOR_DB_NAME: dbName,
      CONDUCTOR_APP_SECRET_ARN: this.appSecret.secretArn,
      CONDUCTOR_GITHUB_API_URL: props.githubApiUrl ?? 'https://api.github.com',
      CONDUCTOR_LEASE_S: String(props.leaseSeconds ?? 45),
      CONDUCTOR_DB_POOL_MAX: String(props.dbPoolMax ?? 2),
      // RDS Proxy pins a session that prepares a statement to one database
      // connection; behind it the hot statements go unprepared.
      CONDUCTOR_DB_PREPARED_STATEMENTS: String(!this.proxy),
    };
    // lib/context.ts reads both secrets at cold start through this extension
    // (a local HTTP endpoint with a cache), so no function bundles the SDK for it.
    const paramsAndSecrets = lambda.ParamsAndSecretsLayerVersion.fromVersion(
      lambda.ParamsAndSecretsVersions.V1_0_103,
      { logLevel: lambda.ParamsAndSecretsLogLevel.WARN },
    );
    const retention = props.logRetentionDays ?? logs.RetentionDays.ONE_MONTH;
    const functions = {} as Record<ConductorFunction, lambda.Function>;
    for (const name of FUNCTION_NAMES) {
      functions[name] = this.createFunction(name, {
        bundleDir,
        environment,
        paramsAndSecrets,
        retention,
        vpc,
        subnets: functionSubnets,
      });
    }
    this.functions = functions;

    // Compile runs only when webhook, api or sweep invoke it (asynchronously).
    // Lambda retries a failed async invocation twice, then the event lands in
    // the queue; the sweep re-dispatches a job left pending either way.
    this.compileFailures = new sqs.Queue(this, 'CompileFailures', {
      retentionPeriod: Duration.days(14),
      encryption: sqs.QueueEncryption.SQS_MANAGED,
      enforceSSL: true,
    });
    functions.compile.configureAsyncInvoke({
      onFailure: new destinations.SqsDestination(this.compileFailures),
      retryAttempts: 2,
      maxEventAge: Duration.hours(1),
    });
    for (const name of COMPILE_INVOKERS) {
      functions.compile.grantInvoke(functions[name]);
      functions[name].addEnvironment('CONDUCTOR_COMPILE_FUNCTION', functions.compile.functionName);
    }

    // --- HTTP API, built from the same route table as the local server -------
    const integrations = {} as Record<RoutedFunction, apigwv2Integrations.HttpLambdaIntegration>;
    const integrationOf = (fn: RoutedFunction) => {
      integrations[fn] ??= new apigwv2Integrations.HttpLambdaIntegration(
        `${pascal(fn)}Integration`,
        functions[fn],
        // One permission per function for the whole API, not one per route.
        { scopePermissionToRoute: false },
      );
      return integrations[fn];
    };
    this.httpApi = new apigwv2.HttpApi(this, 'HttpApi', {
      apiName: `${this.stackName}-api`,
      description: 'Conductor: webhooks, the runner protocol and the admin API',
      // `$default`: any route not in the table gets the api function's JSON 404.
      defaultIntegration: integrationOf('api'),
    });
    for (const route of ROUTES) {
      new apigwv2.HttpRoute(this, `Route ${routeKey(route)}`, {
        httpApi: this.httpApi,
        routeKey: apigwv2.HttpRouteKey.with(route.path, apigwv2.HttpMethod[route.method]),
        integration: integrationOf(route.fn),
      });
    }

    // --- The sweep's schedule ------------------------------------------------
    new events.Rule(this, 'SweepSchedule', {
      description: 'Conductor: run the sweep',
      schedule: events.Schedule.rate(props.sweepInterval ?? Duration.minutes(1)),
      targets: [new eventsTargets.LambdaFunction(functions.sweep)],
    });
    // A failed sweep is not worth retrying: the next one is at most one interval away.
    functions.sweep.configureAsyncInvoke({ retryAttempts: 0, maxEventAge: Duration.minutes(1) });

    // --- Migrations on deploy ------------------------------------------------
    const migrations = new CustomResource(this, 'Migrations', {
      serviceToken: functions.migrate.functionArn,
      resourceType: 'Custom::ConductorMigrations',
      // A new value on every deploy whose code changed: CloudFormation then
      // sends an Update, and the migrate function applies what is missing.
      properties: {
        CodeHash: bundleHash(bundleDir),
        MigrationsHash: readFileSync(
          join(bundleDir, 'migrate', MIGRATIONS_HASH_FILE),
          'utf8',
        ).trim(),
      },
      serviceTimeout: Duration.minutes(10),
    });
    // The cluster's writer and the proxy's target must be up before migrating.
    for (const c of dependsOnDatabase) migrations.node.addDependency(c);
    // New code runs only against a migrated schema.
    for (const name of FUNCTION_NAMES) {
      if (name !== 'migrate') functions[name].node.addDependency(migrations);
    }

    // --- Alarms --------------------------------------------------------------
    this.alarmTopic = new sns.Topic(this, 'Alarms', { displayName: 'Conductor alarms' });
    if (props.alarmEmail) {
      this.alarmTopic.addSubscription(new subscriptions.EmailSubscription(props.alarmEmail));
    }
    this.createAlarms();

    new CfnOutput(this, 'ApiUrl', { value: this.httpApi.apiEndpoint });
    new CfnOutput(this, 'AppSecretArn', { value: this.appSecret.secretArn });
    new CfnOutput(this, 'DatabaseSecretArn', { value: this.dbSecret.secretArn });
    new CfnOutput(this, 'DatabaseHost', { value: dbHost });
    new CfnOutput(this, 'MigrateFunctionName', { value: functions.migrate.functionName });
    new CfnOutput(this, 'CompileFailuresQueueUrl', { value: this.compileFailures.queueUrl });
    new CfnOutput(this, 'AlarmTopicArn', { value: this.alarmTopic.topicArn });
  }

  private createVpc(nat: 'gateway' | 'instance'): ec2.Vpc {
    let natGatewayProvider: ec2.NatProvider;
    let natInstances: ec2.NatInstanceProviderV2 | undefined;
    if (nat === 'instance') {
      natInstances = ec2.NatProvider.instanceV2({
        instanceType: new ec2.InstanceType('t4g.nano'),
        // An SSM parameter resolved at deploy time, not a lookup at synthesis.
        machineImage: ec2.MachineImage.latestAmazonLinux2023({
          cpuType: ec2.AmazonLinuxCpuType.ARM_64,
        }),
        // Standard credits: a busy NAT instance slows down instead of billing more.
        creditSpecification: ec2.CpuCredits.STANDARD,
        // Inbound only from inside the VPC (set below, once the VPC exists).
        defaultAllowedTraffic: ec2.NatTrafficDirection.OUTBOUND_ONLY,
      });
      natGatewayProvider = natInstances;
    } else {
      natGatewayProvider = ec2.NatProvider.gateway();
    }
    const vpc = new ec2.Vpc(this, 'Vpc', {
      maxAzs: 2,
      // One NAT for both zones: the cheap choice. A zone outage then also
      // cuts the other zone's functions off from the forges.
      natGateways: 1,
      natGatewayProvider,
      subnetConfiguration: [
        { name: 'public', subnetType: ec2.SubnetType.PUBLIC, cidrMask: 24 },
        { name: 'functions', subnetType: ec2.SubnetType.PRIVATE_WITH_EGRESS, cidrMask: 22 },
        { name: 'database', subnetType: ec2.SubnetType.PRIVATE_ISOLATED, cidrMask: 24 },
      ],
      // Restricting the default group takes a custom resource (another
      // Lambda); nothing here uses the default group.
      restrictDefaultSecurityGroup: false,
      // Free: S3 traffic (CloudFormation's custom resource answers) skips the NAT.
      gatewayEndpoints: { S3: { service: ec2.GatewayVpcEndpointAwsService.S3 } },
    });
    natInstances?.connections.allowFrom(ec2.Peer.ipv4(vpc.vpcCidrBlock), ec2.Port.allTraffic());
    return vpc;
  }

  private createAppSecret(): secretsmanager.Secret {
    // Secrets Manager generates one value per secret, and the app secret needs
    // two. The sealing key is generated in a secret of its own (64 hex
    // digits, 32 bytes) and copied into the app secret's template through a
    // dynamic reference that CloudFormation resolves; the admin token is
    // generated into the app secret itself. Neither value is in the template.
    const secretKey = new secretsmanager.Secret(this, 'SecretKey', {
      description:
        'Conductor: the key that seals secrets at rest; copied into the app secret. Keep it.',
      generateSecretString: {
        passwordLength: 64,
        excludeUppercase: true,
        excludePunctuation: true,
        excludeCharacters: 'ghijklmnopqrstuvwxyz',
        includeSpace: false,
      },
      // Losing this key loses every sealed secret, webhook secret and forge token.
      removalPolicy: RemovalPolicy.RETAIN,
    });
    return new secretsmanager.Secret(this, 'AppSecret', {
      description: 'Conductor: {"admin_token", "secret_key"}, read by every function at cold start',
      generateSecretString: {
        secretStringTemplate: `{"secret_key":"${secretKey.secretValue.unsafeUnwrap()}"}`,
        generateStringKey: 'admin_token',
        passwordLength: 48,
        excludePunctuation: true,
        includeSpace: false,
      },
      removalPolicy: RemovalPolicy.RETAIN,
    });
  }

  private createDatabase(
    vpc: ec2.IVpc,
    databaseSubnets: ec2.SubnetSelection,
    functionSubnets: ec2.SubnetSelection,
    props: ConductorStackProps,
  ): { cluster: rds.DatabaseCluster; proxy?: rds.DatabaseProxy } {
    const minCapacity = props.minCapacity ?? 0.5;
    const useProxy = props.proxy ?? true;
    const databaseGroup = new ec2.SecurityGroup(this, 'DatabaseSecurityGroup', {
      vpc,
      description: 'Conductor database: only the functions (or the proxy) get in',
      allowAllOutbound: false,
    });
    const version = props.postgresVersion ?? DEFAULT_POSTGRES_VERSION;
    const cluster = new rds.DatabaseCluster(this, 'Database', {
      engine: rds.DatabaseClusterEngine.auroraPostgres({
        version: rds.AuroraPostgresEngineVersion.of(version, version.split('.')[0]!),
      }),
      // The generated secret: JSON with username, password, host, port, dbname.
      credentials: rds.Credentials.fromGeneratedSecret(DB_USER),
      defaultDatabaseName: DB_NAME,
      writer: rds.ClusterInstance.serverlessV2('writer', { publiclyAccessible: false }),
      serverlessV2MinCapacity: minCapacity,
      serverlessV2MaxCapacity: props.maxCapacity ?? 4,
      serverlessV2AutoPauseDuration:
        minCapacity === 0 ? (props.autoPauseAfter ?? Duration.minutes(5)) : undefined,
      vpc,
      vpcSubnets: databaseSubnets,
      securityGroups: [databaseGroup],
      port: DB_PORT,
      storageEncrypted: true,
      backup: { retention: Duration.days(7) },
      deletionProtection: props.deletionProtection ?? true,
      removalPolicy: RemovalPolicy.SNAPSHOT,
    });
    if (minCapacity === 0 && useProxy) {
      Annotations.of(this).addWarningV2(
        'conductor:autoPauseWithProxy',
        'minCapacity 0 with RDS Proxy: the proxy keeps connections to the instance, so it does not pause; set proxy to false',
      );
    }
    if (!useProxy) {
      databaseGroup.addIngressRule(
        this.functionsSecurityGroup,
        ec2.Port.tcp(DB_PORT),
        'Conductor functions',
      );
      return { cluster };
    }
    const proxyGroup = new ec2.SecurityGroup(this, 'ProxySecurityGroup', {
      vpc,
      description: 'Conductor RDS Proxy: only the functions get in',
      allowAllOutbound: true,
    });
    proxyGroup.addIngressRule(
      this.functionsSecurityGroup,
      ec2.Port.tcp(DB_PORT),
      'Conductor functions',
    );
    // DatabaseProxy lets its own group into the cluster's group on the cluster's port.
    const proxy = new rds.DatabaseProxy(this, 'Proxy', {
      proxyTarget: rds.ProxyTarget.fromCluster(cluster),
      secrets: [cluster.secret!],
      vpc,
      vpcSubnets: functionSubnets,
      securityGroups: [proxyGroup],
      requireTLS: true,
      // Password authentication with the cluster's secret; no IAM database auth.
      iamAuth: false,
      clientPasswordAuthType: rds.ClientPasswordAuthType.POSTGRES_SCRAM_SHA_256,
      // Leave a tenth of max_connections for migrations and a human with psql.
      maxConnectionsPercent: 90,
      debugLogging: false,
    });
    return { cluster, proxy };
  }

  private createFunction(
    name: ConductorFunction,
    opts: {
      bundleDir: string;
      environment: Record<string, string>;
      paramsAndSecrets: lambda.ParamsAndSecretsLayerVersion;
      retention: logs.RetentionDays;
      vpc: ec2.IVpc;
      subnets: ec2.SubnetSelection;
    },
  ): lambda.Function {
    const id = pascal(name);
    const spec = SPECS[name];
    const logGroup = new logs.LogGroup(this, `${id}Logs`, {
      retention: opts.retention,
      removalPolicy: RemovalPolicy.DESTROY,
    });
    // A role per function, with what that function uses and nothing else
    // (no AWS managed policies: they grant logs on every group).
    const role = new iam.Role(this, `${id}Role`, {
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
    role.addToPolicy(
      new iam.PolicyStatement({
        sid: 'ReadConductorSecrets',
        actions: ['secretsmanager:GetSecretValue'],
        resources: [this.dbSecret.secretArn, this.appSecret.secretArn],
      }),
    );
    return new lambda.Function(this, `${id}Function`, {
      description: `Conductor: ${spec.description}`,
      runtime: lambda.Runtime.NODEJS_22_X,
      architecture: lambda.Architecture.ARM_64,
      handler: 'index.handler',
      code: lambda.Code.fromAsset(join(opts.bundleDir, name)),
      memorySize: spec.memorySize,
      timeout: spec.timeout,
      role,
      logGroup,
      environment: opts.environment,
      paramsAndSecrets: opts.paramsAndSecrets,
      vpc: opts.vpc,
      vpcSubnets: opts.subnets,
      securityGroups: [this.functionsSecurityGroup],
    });
  }

  private createAlarms(): void {
    const action = new cloudwatchActions.SnsAction(this.alarmTopic);
    const alarm = (id: string, metric: cloudwatch.IMetric, description: string) => {
      const a = new cloudwatch.Alarm(this, id, {
        metric,
        threshold: 1,
        evaluationPeriods: 1,
        comparisonOperator: cloudwatch.ComparisonOperator.GREATER_THAN_OR_EQUAL_TO_THRESHOLD,
        treatMissingData: cloudwatch.TreatMissingData.NOT_BREACHING,
        alarmDescription: description,
      });
      a.addAlarmAction(action);
      return a;
    };
    const fiveMinutes = { period: Duration.minutes(5), statistic: cloudwatch.Stats.SUM };

    // Unhandled errors and timeouts; the HTTP handlers turn their own errors
    // into answers, which the API's 5xx alarm counts instead.
    for (const name of FUNCTION_NAMES) {
      alarm(
        `${pascal(name)}ErrorsAlarm`,
        this.functions[name].metricErrors(fiveMinutes),
        `Conductor ${name}: the function failed (an unhandled error or a timeout)`,
      );
    }
    alarm(
      'ApiServerErrorsAlarm',
      this.httpApi.metricServerError(fiveMinutes),
      'Conductor API answered 5xx: an internal error, or a function that failed or timed out',
    );
    alarm(
      'CompileFailuresAlarm',
      this.compileFailures.metricApproximateNumberOfMessagesVisible({
        period: Duration.minutes(5),
        statistic: cloudwatch.Stats.MAXIMUM,
      }),
      'Conductor compile: async invocations failed three times (the sweep re-dispatches the jobs)',
    );

    // The sweep logs {"message":"sweep repaired", <counts>} when it repaired
    // anything (lib/sweeper.ts). Metric filters turn the counts into metrics
    // without a change to the code; the alarm fires on the repairs that mean
    // a job was stalled (a settle, a promotion or a compile that was lost),
    // not on expired leases, which a runner that died explains.
    const namespace = `Conductor/${this.stackName}`;
    const sweepLogs = this.functions.sweep.logGroup;
    const counted = {
      SweepJobsSettled: 'jobs_settled',
      SweepTasksPromoted: 'tasks_promoted',
      SweepCompilesRedispatched: 'compiles_redispatched',
      SweepLeasesExpired: 'leases_expired',
      SweepErrors: 'errors',
    } as const;
    const metrics = {} as Record<keyof typeof counted, cloudwatch.Metric>;
    for (const [metricName, field] of Object.entries(counted) as [keyof typeof counted, string][]) {
      const filter = new logs.MetricFilter(this, `${metricName}Filter`, {
        logGroup: sweepLogs,
        filterPattern: logs.FilterPattern.stringValue('$.message', '=', 'sweep repaired'),
        metricNamespace: namespace,
        metricName,
        metricValue: `$.${field}`,
        // No default value: no data while nothing needs repairing (custom
        // metrics are billed by the hours they receive data).
      });
      metrics[metricName] = filter.metric(fiveMinutes);
    }
    alarm(
      'SweepRepairedStalledJobsAlarm',
      new cloudwatch.MathExpression({
        expression: 'settled + promoted + redispatched',
        usingMetrics: {
          settled: metrics.SweepJobsSettled,
          promoted: metrics.SweepTasksPromoted,
          redispatched: metrics.SweepCompilesRedispatched,
        },
        period: Duration.minutes(5),
        label: 'stalled jobs the sweep repaired',
      }),
      'Conductor sweep repaired stalled jobs (a lost settle, promotion or compile): look for the errors before it',
    );
    alarm(
      'SweepRepairErrorsAlarm',
      metrics.SweepErrors,
      'Conductor sweep: a repair failed (the sweep logged it and went on)',
    );
  }
}

/** A digest of every bundle: it changes when any function's code (or a migration) does. */
export function bundleHash(bundleDir: string): string {
  const hash = createHash('sha256');
  for (const name of FUNCTION_NAMES) {
    hash.update(name);
    hash.update(readFileSync(join(bundleDir, name, 'index.mjs')));
  }
  return hash.digest('hex');
}
