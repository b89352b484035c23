// The Conductor deployment: one Lambda per function behind an HTTP API whose
// routes come from lib/http/routes.ts, the sweep on an EventBridge schedule,
// Aurora PostgreSQL Serverless v2 that pauses when idle (RDS Proxy as an
// option), the idle gate's bucket, the runners' push channel (a WebSocket API), the webhook queue, the secrets in Secrets
// Manager, migrations applied on deploy, alarms. Synthesises offline: no
// context lookups, no Docker (the functions are bundled by scripts/bundle.ts).
// This file is the wiring; the parts are network.ts, database.ts,
// secrets.ts, functions.ts and alarms.ts.
import { createHash } from 'node:crypto';
import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import {
  aws_apigatewayv2 as apigwv2,
  aws_apigatewayv2_integrations as apigwv2Integrations,
  CfnOutput,
  CustomResource,
  Duration,
  aws_lambda_destinations as destinations,
  type aws_ec2 as ec2,
  aws_events as events,
  aws_events_targets as eventsTargets,
  aws_iam as iam,
  type aws_lambda as lambda,
  type aws_logs as logs,
  type aws_rds as rds,
  Stack,
  type StackProps,
  type aws_s3 as s3,
  type aws_secretsmanager as secretsmanager,
  type aws_sns as sns,
  aws_sqs as sqs,
  Tags,
} from 'aws-cdk-lib';
import type { Construct } from 'constructs';
import { CHANNEL_PREFIX } from '../lib/channel/registry.ts';
import { ROUTES, type FunctionName as RoutedFunction, routeKey } from '../lib/http/routes.ts';
import { DELIVERY_PREFIX } from '../lib/idle/aws-intake.ts';
import { GATE_KEY } from '../lib/idle/s3.ts';
import { WORKERS_PREFIX } from '../lib/idle/workers.ts';
import { DEFAULT_OUTDIR, FUNCTION_NAMES, MIGRATIONS_HASH_FILE } from '../scripts/bundle.ts';
import { Alarms } from './alarms.ts';
import { Database, type ExistingDatabase } from './database.ts';
import { SETTING_DEFAULTS as DEFAULTS } from './defaults.ts';
import { RunnerFleet } from './fleet.ts';
import {
  type ConductorFunction,
  DATABASE_FREE,
  Functions,
  pascal,
  RESERVED_CONCURRENCY,
} from './functions.ts';
import { type ExistingVpc, Network } from './network.ts';
import { createAppSecrets, createGitHubAppSecret } from './secrets.ts';
import { ARTIFACT_ACTIONS, artifactsBucket, grantArtifacts, privateBucket } from './storage.ts';

export { DB_NAME, type ExistingDatabase } from './database.ts';
export type { ConductorFunction } from './functions.ts';
export type { ExistingVpc } from './network.ts';
export { FUNCTION_NAMES };

/** The functions allowed to invoke compile (and told its name). */
export const COMPILE_INVOKERS = [
  'webhook',
  'webhookQueue',
  'api',
  'sweep',
] as const satisfies ConductorFunction[];

/**
 * The functions that post commit statuses, whose links to the job pages they
 * sign: each is told CONDUCTOR_PUBLIC_URL (test/infra/bundle.test.ts checks
 * this list against what each bundle carries).
 */
export const STATUS_POSTERS = [
  'webhook',
  'webhookQueue',
  'api',
  'compile',
  'complete',
  'sweep',
] as const satisfies ConductorFunction[];

/**
 * The functions that read the GitHub App's secret, with `githubApp`: those
 * that post statuses (check runs) and call GitHub for a project (the webhook's
 * deliveries, the compile's file, the api's permission questions).
 */
export const GITHUB_APP_READERS = STATUS_POSTERS;

/**
 * The functions that post the push channel's hints (lib/app/channel.ts,
 * hintRunners, which tasksClaimable runs after a commit): each is told the
 * channel's URLs, may post to its connections, and reads the registry
 * (test/infra/bundle.test.ts checks this list against what each bundle
 * carries). The claim is one of them twice over: it also offers the channel.
 */
export const CHANNEL_HINTERS = [
  'webhook',
  'webhookQueue',
  'api',
  'compile',
  'claim',
  'complete',
  'sweep',
] as const satisfies ConductorFunction[];

/** The push channel's WebSocket stage (its URL ends in it). */
export const CHANNEL_STAGE = 'v1';

/** The functions that carry the ecs provider (lib/app/fleet-aws.ts) and launch Fargate runners. */
export const RUNNER_LAUNCHERS = ['api', 'sweep'] as const satisfies ConductorFunction[];

const ROOT = fileURLToPath(new URL('..', import.meta.url));

/** The database role the functions sign in as (IAM authentication); migrate uses the owner. */
export const APP_DB_USER = 'conductor_app';
/** Where the RDS certificate authorities are in the Lambda runtime (for verify-full). */
export const RUNTIME_CA_BUNDLE = '/var/runtime/ca-cert.pem';

// Functions and what of the idle gate's bucket each touches (lib/idle).
// Readers read the marker, the close's markers and the worker tokens
// (lib/idle/workers.ts): claims, the sweep, and the api (health and
// anonymous pages behind a closed gate).
const GATE_READERS = ['claim', 'sweep', 'api'] as const satisfies ConductorFunction[];
const GATE_WRITERS = [
  'webhook',
  'webhookQueue',
  'api',
  'sweep',
  'compile',
  'complete',
] as const satisfies ConductorFunction[];
// Those that seal or open secrets (the channel checks tickets signed with a
// key derived from the keyring's): every function but heartbeat and migrate.
const KEY_READERS: readonly ConductorFunction[] = [
  'channel',
  'webhook',
  'webhookQueue',
  'claim',
  'logs',
  'complete',
  'api',
  'compile',
  'sweep',
];

/** max_connections of Aurora PostgreSQL Serverless v2 at a maximum capacity (2 GiB an ACU). */
export function auroraMaxConnections(maxAcu: number): number {
  return Math.min(5000, Math.floor((maxAcu * 2 * 1024 ** 3) / 9_531_392));
}

export interface ConductorStackProps extends StackProps {
  /** Where scripts/bundle.ts wrote `<name>/index.mjs`; default dist/functions. */
  bundleDir?: string;
  /** How often the sweep runs; default one minute. */
  sweepInterval?: Duration;
  /** Aurora Serverless v2 minimum ACUs; default 0, which pauses the idle database (docs/deploy.md). */
  minCapacity?: number;
  /** Aurora Serverless v2 maximum ACUs; default 4. */
  maxCapacity?: number;
  /** Idle time before a 0-ACU instance pauses (5 minutes to 1 day); default 5 minutes. */
  autoPauseAfter?: Duration;
  /** Aurora PostgreSQL version (15 or 16); default 16.11. */
  postgresVersion?: string;
  /** Put RDS Proxy between the functions and Aurora (keeps Aurora awake); default false. */
  proxy?: boolean;
  /** Refuse to delete the cluster; default true. */
  deletionProtection?: boolean;
  /** Use this VPC instead of creating one. */
  existingVpc?: ExistingVpc;
  /** Use this database instead of creating Aurora (and RDS Proxy). */
  existingDatabase?: ExistingDatabase;
  /**
   * Run the functions outside any VPC: no VPC, no NAT, nothing billed while
   * idle but the secrets and the alarms. Only with an `existingDatabase` the
   * functions reach over the internet (Neon, Supabase, a public RDS with TLS),
   * and without `existingVpc`. Default false.
   */
  outsideVpc?: boolean;
  /** A created VPC's way out to the forges: a t4g.nano NAT instance (default) or a NAT gateway (HA). */
  nat?: 'gateway' | 'instance';
  /** CONDUCTOR_GITHUB_API_URL; default https://api.github.com. */
  githubApiUrl?: string;
  /**
   * The GitHub App (docs/deploy.md, "The GitHub App"): adds the secret
   * GitHubAppSecret ({"app_id", "private_key", "webhook_secret"}, filled in by
   * the operator) and lets the functions that call GitHub for a project read
   * it. Default false.
   */
  githubApp?: boolean;
  /** CONDUCTOR_LEASE_S; default 45 (docs/scheduling.md, "Lost runners"). */
  leaseSeconds?: number;
  /** CONDUCTOR_DB_POOL_MAX, connections per Lambda container; default 2. */
  dbPoolMax?: number;
  /** Days the functions' logs are kept; default 30. */
  logRetentionDays?: logs.RetentionDays;
  /** An address that receives the alarms (it must confirm the subscription). */
  alarmEmail?: string;
  /** Reserve concurrency per function, so connections stay under max_connections; default true. */
  reservedConcurrency?: boolean;
  /** API Gateway's throttle for the whole API: requests a second, and the burst; default 50 and 100. */
  throttle?: { rate: number; burst: number };
  /**
   * CONDUCTOR_PUBLIC_URL: where people reach the job pages (a custom domain);
   * commit statuses link there. Default: the HTTP API's own URL.
   */
  publicUrl?: string;
  /**
   * Runners on Fargate for `ecs` pools: the cluster, the runner's task
   * definition, its log group, the token files' bucket and their IAM
   * (infra/fleet.ts). Needs a VPC (not `outsideVpc`). Default false.
   */
  fargateRunners?: boolean;
  /**
   * The runners' push channel (docs/runner.md, "The push channel"): an API
   * Gateway WebSocket API and the channel function; free while no runner
   * holds it open (infra/cost.ts, pushChannelCost). Default true; false:
   * runners poll.
   */
  pushChannel?: boolean;
  /** The runners' image instead of building Dockerfile.runner (needs Docker at deploy). */
  runnerImage?: string;
  /** The build context of Dockerfile.runner; default the repository (tests give a stand-in). */
  runnerImageDir?: string;
}

export class ConductorStack extends Stack {
  readonly functions: Record<ConductorFunction, lambda.Function>;
  readonly httpApi: apigwv2.HttpApi;
  /** The functions' security group; none when they run outside a VPC. */
  readonly functionsSecurityGroup?: ec2.SecurityGroup;
  readonly appSecret: secretsmanager.Secret;
  readonly secretKey: secretsmanager.Secret;
  readonly gateBucket: s3.Bucket;
  readonly artifactsBucket: s3.Bucket;
  readonly webhookDeadLetters: sqs.Queue;
  readonly dbSecret: secretsmanager.ISecret;
  readonly cluster?: rds.DatabaseCluster;
  readonly proxy?: rds.DatabaseProxy;
  readonly compileFailures: sqs.Queue;
  readonly alarmTopic: sns.Topic;
  /** Fargate runners for `ecs` pools, with `fargateRunners`. */
  readonly runnerFleet?: RunnerFleet;
  /** The runners' push channel and its stage, unless `pushChannel` is false. */
  readonly channelApi?: apigwv2.WebSocketApi;
  readonly channelStage?: apigwv2.WebSocketStage;

  constructor(scope: Construct, id: string, props: ConductorStackProps = {}) {
    super(scope, id, props);
    Tags.of(this).add('app', 'conductor');
    const bundleDir = props.bundleDir ?? DEFAULT_OUTDIR;
    for (const name of FUNCTION_NAMES) {
      if (!existsSync(join(bundleDir, name, 'index.mjs'))) {
        throw new Error(`no bundle at ${join(bundleDir, name, 'index.mjs')}: run npm run bundle`);
      }
    }

    if (props.fargateRunners && props.outsideVpc) {
      throw new Error('fargateRunners needs a VPC for the runners: not with outsideVpc');
    }
    if (props.outsideVpc && (!props.existingDatabase || props.existingVpc)) {
      throw new Error(
        'outsideVpc needs an existingDatabase the functions reach over the internet, and no existingVpc',
      );
    }
    const network = props.outsideVpc
      ? undefined
      : new Network(this, { existingVpc: props.existingVpc, nat: props.nat ?? DEFAULTS.nat });
    this.functionsSecurityGroup = network?.functionsSecurityGroup;
    const { appSecret, secretKey } = createAppSecrets(this);
    const githubAppSecret =
      (props.githubApp ?? DEFAULTS.githubApp) ? createGitHubAppSecret(this) : undefined;
    this.appSecret = appSecret;
    this.secretKey = secretKey;
    const minCapacity = props.minCapacity ?? DEFAULTS.minCapacity;
    const maxCapacity = props.maxCapacity ?? DEFAULTS.maxCapacity;
    const database = new Database(this, network, {
      existingDatabase: props.existingDatabase,
      minCapacity,
      maxCapacity,
      autoPauseAfter: props.autoPauseAfter ?? Duration.minutes(DEFAULTS.autoPauseMinutes),
      postgresVersion: props.postgresVersion ?? DEFAULTS.postgresVersion,
      proxy: props.proxy ?? DEFAULTS.proxy,
      deletionProtection: props.deletionProtection ?? DEFAULTS.deletionProtection,
    });
    this.cluster = database.cluster;
    this.proxy = database.proxy;
    this.dbSecret = database.secret;
    // IAM tokens as the application role, straight to Aurora. Through the
    // proxy or to an existing database, the functions use the database
    // secret as before (docs/deploy.md, "Least privilege").
    const iamAuth = this.cluster !== undefined && !this.proxy;
    const poolMax = props.dbPoolMax ?? DEFAULTS.dbPoolMax;
    const reserve = props.reservedConcurrency ?? DEFAULTS.reservedConcurrency;
    if (reserve && this.cluster) {
      const used = FUNCTION_NAMES.filter((f) => !DATABASE_FREE.includes(f)).reduce(
        (n, f) => n + RESERVED_CONCURRENCY[f] * poolMax,
        0,
      );
      const limit = Math.floor(auroraMaxConnections(maxCapacity) * 0.9);
      if (used > limit) {
        throw new Error(
          `reserved concurrency x dbPoolMax is ${used} connections, over ${limit} (90% of max_connections at ${maxCapacity} ACU): lower dbPoolMax or raise maxCapacity`,
        );
      }
    }

    // The idle gate's marker (lib/idle), the webhook directory and queued
    // deliveries too large for a message. Private, TLS only, reached through
    // the VPC's gateway endpoint.
    this.gateBucket = privateBucket(this, 'GateBucket', [
      { prefix: DELIVERY_PREFIX, expiration: Duration.days(14) },
    ]);
    this.webhookDeadLetters = new sqs.Queue(this, 'WebhookDeadLetters', {
      retentionPeriod: Duration.days(14),
      encryption: sqs.QueueEncryption.SQS_MANAGED,
      enforceSSL: true,
    });
    const gateEnv = { CONDUCTOR_GATE_BUCKET: this.gateBucket.bucketName };
    // Artifacts and caches (infra/storage.ts).
    this.artifactsBucket = artifactsBucket(this);
    const artifactsEnv = { CONDUCTOR_ARTIFACTS_BUCKET: this.artifactsBucket.bucketName };
    const functions = new Functions(this, {
      bundleDir,
      network,
      reserveConcurrency: reserve,
      retention: props.logRetentionDays ?? DEFAULTS.logRetentionDays,
      secretsOf: (name) => [
        ...(name === 'migrate' || (!iamAuth && !DATABASE_FREE.includes(name))
          ? [this.dbSecret]
          : []),
        ...(KEY_READERS.includes(name) ? [secretKey] : []),
        ...(name === 'api' ? [appSecret] : []),
        ...(githubAppSecret && (GITHUB_APP_READERS as readonly string[]).includes(name)
          ? [githubAppSecret]
          : []),
      ],
      environmentOf: (name) => ({
        // A function that never connects is still told a database (the
        // context's pool is made lazily), as the IAM user with no right to
        // connect: neither the secret nor rds-db:connect.
        ...(name === 'migrate' || (!iamAuth && !DATABASE_FREE.includes(name))
          ? { CONDUCTOR_DB_SECRET_ARN: this.dbSecret.secretArn }
          : { CONDUCTOR_DB_IAM_USER: APP_DB_USER }),
        ...(name === 'migrate' && iamAuth ? { CONDUCTOR_DB_APP_ROLE: APP_DB_USER } : {}),
        ...(KEY_READERS.includes(name) ? { CONDUCTOR_SECRET_KEY_ARN: secretKey.secretArn } : {}),
        ...(name === 'api' ? { CONDUCTOR_APP_SECRET_ARN: appSecret.secretArn } : {}),
        ...(githubAppSecret && (GITHUB_APP_READERS as readonly string[]).includes(name)
          ? { CONDUCTOR_GITHUB_APP_SECRET_ARN: githubAppSecret.secretArn }
          : {}),
        ...((GATE_READERS as readonly string[]).includes(name) ||
        (GATE_WRITERS as readonly string[]).includes(name)
          ? gateEnv
          : {}),
        ...(name in ARTIFACT_ACTIONS ? artifactsEnv : {}),
        // Long enough to wait out a resume of a paused Aurora.
        ...(name === 'webhookQueue' ? { CONDUCTOR_DB_CONNECT_TIMEOUT_MS: '60000' } : {}),
      }),
      environment: {
        NODE_OPTIONS: '--enable-source-maps',
        // The runtime's bundle holds the RDS certificate authorities.
        NODE_EXTRA_CA_CERTS: RUNTIME_CA_BUNDLE,
        CONDUCTOR_DB_TLS: 'verify-full',
        CONDUCTOR_DB_HOST: database.host,
        CONDUCTOR_DB_NAME: database.name,
        CONDUCTOR_GITHUB_API_URL: props.githubApiUrl ?? DEFAULTS.githubApiUrl,
        CONDUCTOR_LEASE_S: String(props.leaseSeconds ?? DEFAULTS.leaseSeconds),
        CONDUCTOR_DB_POOL_MAX: String(poolMax),
        // RDS Proxy pins a session that prepares a statement to one database
        // connection; behind it the hot statements go unprepared.
        CONDUCTOR_DB_PREPARED_STATEMENTS: String(!this.proxy),
      },
    }).byName;
    this.functions = functions;
    if (iamAuth) {
      for (const name of FUNCTION_NAMES) {
        if (name !== 'migrate' && !DATABASE_FREE.includes(name)) {
          this.cluster!.grantConnect(functions[name], APP_DB_USER);
        }
      }
    }
    for (const [name, actions] of Object.entries(ARTIFACT_ACTIONS)) {
      const fn = functions[name as keyof typeof ARTIFACT_ACTIONS];
      grantArtifacts(this.artifactsBucket, fn, actions);
    }
    const gateObject = this.gateBucket.arnForObjects(GATE_KEY);
    const gateMarkers = this.gateBucket.arnForObjects('gate/*');
    const workerTokens = this.gateBucket.arnForObjects(`${WORKERS_PREFIX}*`);
    for (const name of GATE_READERS) {
      functions[name].addToRolePolicy(
        new iam.PolicyStatement({
          actions: ['s3:GetObject'],
          resources: [gateMarkers, workerTokens],
        }),
      );
      // Without ListBucket, S3 answers a missing object (a closed gate, an
      // unknown token) 403 instead of 404. The keys are hashes, not secrets.
      functions[name].addToRolePolicy(
        new iam.PolicyStatement({
          actions: ['s3:ListBucket'],
          resources: [this.gateBucket.bucketArn],
        }),
      );
    }
    // Registering and revoking workers writes their token hashes; rotating a
    // webhook secret rewrites the project's directory entry.
    functions.api.addToRolePolicy(
      new iam.PolicyStatement({
        actions: ['s3:PutObject'],
        resources: [workerTokens, this.gateBucket.arnForObjects('webhooks/*')],
      }),
    );
    // The close's markers (lib/idle/gate.ts), and the workers copied once.
    functions.sweep.addToRolePolicy(
      new iam.PolicyStatement({
        actions: ['s3:PutObject', 's3:DeleteObject'],
        resources: [gateMarkers, workerTokens],
      }),
    );
    for (const name of GATE_WRITERS) {
      functions[name].addToRolePolicy(
        new iam.PolicyStatement({ actions: ['s3:PutObject'], resources: [gateObject] }),
      );
    }
    functions.sweep.addToRolePolicy(
      new iam.PolicyStatement({ actions: ['s3:DeleteObject'], resources: [gateObject] }),
    );
    // The webhook function keeps the directory and writes large bodies; the
    // consumer reads and deletes them.
    const directory = this.gateBucket.arnForObjects('webhooks/*');
    const deliveries = this.gateBucket.arnForObjects(`${DELIVERY_PREFIX}*`);
    functions.webhook.addToRolePolicy(
      new iam.PolicyStatement({
        actions: ['s3:GetObject', 's3:PutObject'],
        resources: [directory],
      }),
    );
    // A repository the directory does not know then reads as missing (404),
    // not as refused (403).
    functions.webhook.addToRolePolicy(
      new iam.PolicyStatement({
        actions: ['s3:ListBucket'],
        resources: [this.gateBucket.bucketArn],
      }),
    );
    functions.webhook.addToRolePolicy(
      new iam.PolicyStatement({ actions: ['s3:PutObject'], resources: [deliveries] }),
    );
    functions.webhookQueue.addToRolePolicy(
      new iam.PolicyStatement({
        actions: ['s3:GetObject', 's3:DeleteObject'],
        resources: [deliveries],
      }),
    );
    // The queue is Lambda's own queue of async invocations: the webhook
    // function invokes the consumer with the delivery; a failed one is tried
    // twice more, then lands in the dead-letter queue. Unlike an SQS queue's
    // poller, it costs nothing while nothing is queued.
    functions.webhookQueue.grantInvoke(functions.webhook);
    functions.webhook.addEnvironment(
      'CONDUCTOR_WEBHOOK_CONSUMER',
      functions.webhookQueue.functionName,
    );
    functions.webhookQueue.configureAsyncInvoke({
      retryAttempts: 2,
      maxEventAge: Duration.hours(6),
      onFailure: new destinations.SqsDestination(this.webhookDeadLetters),
    });

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

    if (props.fargateRunners && network) {
      this.runnerFleet = new RunnerFleet(this, {
        network,
        image: props.runnerImage,
        imageDir: props.runnerImageDir ?? ROOT,
        retention: props.logRetentionDays ?? DEFAULTS.logRetentionDays,
      });
      for (const name of RUNNER_LAUNCHERS) this.runnerFleet.grantLaunch(functions[name]);
      // What `conductor pool create --provider ecs --settings` takes (docs/runner.md).
      new CfnOutput(this, 'RunnerPoolSettings', {
        value: this.toJsonString(this.runnerFleet.poolSettings),
      });
    }

    if (props.pushChannel ?? DEFAULTS.pushChannel) {
      [this.channelApi, this.channelStage] = this.createChannel(functions);
    }

    this.httpApi = this.createHttpApi(functions);
    // Set once the API exists. No cycle: a function refers to the Api
    // resource (its ApiEndpoint attribute), and the Api refers to no function;
    // only the integrations, routes and invoke permissions refer to both.
    const publicUrl = props.publicUrl ?? this.httpApi.apiEndpoint;
    for (const name of STATUS_POSTERS) {
      functions[name].addEnvironment('CONDUCTOR_PUBLIC_URL', publicUrl);
    }
    // Throttling for the whole stage: a flood is answered 429 by API Gateway
    // before it costs an invocation or a connection.
    const throttle = props.throttle ?? {
      rate: DEFAULTS.throttleRate,
      burst: DEFAULTS.throttleBurst,
    };
    const stage = this.httpApi.defaultStage!.node.defaultChild as apigwv2.CfnStage;
    stage.defaultRouteSettings = {
      throttlingRateLimit: throttle.rate,
      throttlingBurstLimit: throttle.burst,
    };
    // The forges' webhooks get buckets of their own: a flood elsewhere must
    // not get a delivery answered 429, which GitHub does not retry.
    const webhookRoutes = ROUTES.filter((r) => r.fn === 'webhook').map(routeKey);
    stage.routeSettings = Object.fromEntries(
      webhookRoutes.map((key) => [
        key,
        { ThrottlingRateLimit: throttle.rate, ThrottlingBurstLimit: throttle.burst },
      ]),
    );
    // A route's settings name a route that must exist first.
    for (const key of webhookRoutes) {
      const route = this.node.tryFindChild(`Route ${key}`);
      if (route) stage.node.addDependency(route);
    }

    // --- The sweep's schedule ------------------------------------------------
    new events.Rule(this, 'SweepSchedule', {
      description: 'Conductor: run the sweep',
      schedule: events.Schedule.rate(
        props.sweepInterval ?? Duration.minutes(DEFAULTS.sweepIntervalMinutes),
      ),
      targets: [new eventsTargets.LambdaFunction(functions.sweep)],
    });
    // Once a week the sweep runs whatever the idle gate says: retention of a
    // deployment idle all week, and the backstop for a gate left closed over
    // work (docs/deploy.md). Weekly, not daily: each run wakes a paused
    // Aurora, and the close is crash-safe and due work has its wake time.
    new events.Rule(this, 'DailySchedule', {
      description: 'Conductor: the weekly backstop sweep (retention; ignores the idle gate)',
      schedule: events.Schedule.rate(Duration.days(7)),
      targets: [
        new eventsTargets.LambdaFunction(functions.sweep, {
          event: events.RuleTargetInput.fromObject({ conductor: 'daily' }),
        }),
      ],
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
    for (const c of database.dependables) migrations.node.addDependency(c);
    // New code runs only against a migrated schema.
    for (const name of FUNCTION_NAMES) {
      if (name !== 'migrate') functions[name].node.addDependency(migrations);
    }

    this.alarmTopic = new Alarms(this, {
      functions,
      httpApi: this.httpApi,
      compileFailures: this.compileFailures,
      webhookDeadLetters: this.webhookDeadLetters,
      namespace: `Conductor/${this.stackName}`,
      pausingCluster:
        this.cluster && minCapacity === 0 ? this.cluster.clusterIdentifier : undefined,
      alarmEmail: props.alarmEmail,
    }).topic;

    new CfnOutput(this, 'ApiUrl', { value: this.httpApi.apiEndpoint });
    new CfnOutput(this, 'PublicUrl', { value: publicUrl });
    new CfnOutput(this, 'AppSecretArn', { value: this.appSecret.secretArn });
    new CfnOutput(this, 'SecretKeyArn', { value: this.secretKey.secretArn });
    if (githubAppSecret) {
      new CfnOutput(this, 'GitHubAppSecretArn', { value: githubAppSecret.secretArn });
    }
    new CfnOutput(this, 'GateBucketName', { value: this.gateBucket.bucketName });
    if (this.channelStage) {
      new CfnOutput(this, 'ChannelUrl', { value: this.channelStage.url });
    }
    new CfnOutput(this, 'WebhookDeadLettersUrl', { value: this.webhookDeadLetters.queueUrl });
    new CfnOutput(this, 'DatabaseSecretArn', { value: this.dbSecret.secretArn });
    new CfnOutput(this, 'DatabaseHost', { value: database.host });
    new CfnOutput(this, 'MigrateFunctionName', { value: functions.migrate.functionName });
    new CfnOutput(this, 'CompileFailuresQueueUrl', { value: this.compileFailures.queueUrl });
    new CfnOutput(this, 'AlarmTopicArn', { value: this.alarmTopic.topicArn });
  }

  /**
   * The runners' push channel (issue #52; lib/app/channel.ts): a WebSocket
   * API whose $connect, $disconnect and $default go to the channel function,
   * which keeps the connection registry under `channel/` in the gate's
   * bucket and never touches the database; the functions that make tasks
   * claimable list that registry and post hints to the stage's connections.
   */
  private createChannel(
    functions: Record<ConductorFunction, lambda.Function>,
  ): [apigwv2.WebSocketApi, apigwv2.WebSocketStage] {
    const integration = new apigwv2Integrations.WebSocketLambdaIntegration(
      'ChannelIntegration',
      functions.channel,
    );
    const api = new apigwv2.WebSocketApi(this, 'ChannelApi', {
      apiName: `${this.stackName}-channel`,
      description: "Conductor: the runners' push channel (a hint that tasks are claimable)",
      connectRouteOptions: { integration },
      disconnectRouteOptions: { integration },
      defaultRouteOptions: { integration },
    });
    const stage = new apigwv2.WebSocketStage(this, 'ChannelStage', {
      webSocketApi: api,
      stageName: CHANNEL_STAGE,
      autoDeploy: true,
      // Connects and keepalives: a runner sends one message every 9 minutes.
      throttle: { rateLimit: 50, burstLimit: 100 },
    });
    const registry = this.gateBucket.arnForObjects(`${CHANNEL_PREFIX}*`);
    // $connect writes its connection's entry, $disconnect deletes it.
    functions.channel.addToRolePolicy(
      new iam.PolicyStatement({
        sid: 'ChannelRegistry',
        actions: ['s3:PutObject', 's3:DeleteObject'],
        resources: [registry],
      }),
    );
    functions.channel.addEnvironment('CONDUCTOR_CHANNEL_BUCKET', this.gateBucket.bucketName);
    const connections = this.formatArn({
      service: 'execute-api',
      resource: api.apiId,
      resourceName: `${stage.stageName}/POST/@connections/*`,
    });
    for (const name of ['channel', ...CHANNEL_HINTERS] as const) {
      // The channel function hands out no offer and posts no hint, but its
      // registry is configured only when both URLs are set.
      functions[name].addEnvironment('CONDUCTOR_CHANNEL_URL', stage.url);
      functions[name].addEnvironment('CONDUCTOR_CHANNEL_ENDPOINT', stage.callbackUrl);
    }
    for (const name of CHANNEL_HINTERS) {
      const fn = functions[name];
      // Hints: POST @connections/{id} on this stage, nothing else of the API.
      fn.addToRolePolicy(
        new iam.PolicyStatement({
          sid: 'ChannelHints',
          actions: ['execute-api:ManageConnections'],
          resources: [connections],
        }),
      );
      // The registry: list it, read each entry, delete one API Gateway
      // answers gone (410).
      fn.addToRolePolicy(
        new iam.PolicyStatement({
          sid: 'ChannelRegistryEntries',
          actions: ['s3:GetObject', 's3:DeleteObject'],
          resources: [registry],
        }),
      );
      fn.addToRolePolicy(
        new iam.PolicyStatement({
          sid: 'ChannelRegistryList',
          actions: ['s3:ListBucket'],
          resources: [this.gateBucket.bucketArn],
          conditions: { StringLike: { 's3:prefix': [`${CHANNEL_PREFIX}*`] } },
        }),
      );
    }
    return [api, stage];
  }

  /** The HTTP API, built from the same route table as the local server. */
  private createHttpApi(functions: Record<ConductorFunction, lambda.Function>): apigwv2.HttpApi {
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
    const httpApi = new apigwv2.HttpApi(this, 'HttpApi', {
      apiName: `${this.stackName}-api`,
      description: 'Conductor: webhooks, the runner protocol and the admin API',
      // `$default`: any route not in the table gets the api function's JSON 404.
      defaultIntegration: integrationOf('api'),
    });
    for (const route of ROUTES) {
      new apigwv2.HttpRoute(this, `Route ${routeKey(route)}`, {
        httpApi,
        routeKey: apigwv2.HttpRouteKey.with(route.path, apigwv2.HttpMethod[route.method]),
        integration: integrationOf(route.fn),
      });
    }
    return httpApi;
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
