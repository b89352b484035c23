// The Conductor deployment: one Lambda per function behind an HTTP API whose
// routes come from lib/http/routes.ts, the sweep on an EventBridge schedule,
// Aurora PostgreSQL Serverless v2 behind RDS Proxy, the secrets in Secrets
// Manager, migrations applied on deploy, alarms. Synthesises offline: no
// context lookups, no Docker (the functions are bundled by scripts/bundle.ts).
// This file is the wiring; the parts are network.ts, database.ts,
// secrets.ts, functions.ts and alarms.ts.
import { createHash } from 'node:crypto';
import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
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
  type aws_lambda as lambda,
  aws_logs as logs,
  type aws_rds as rds,
  Stack,
  type StackProps,
  type aws_secretsmanager as secretsmanager,
  type aws_sns as sns,
  aws_sqs as sqs,
  Tags,
} from 'aws-cdk-lib';
import type { Construct } from 'constructs';
import { ROUTES, type FunctionName as RoutedFunction, routeKey } from '../lib/http/routes.ts';
import { DEFAULT_OUTDIR, FUNCTION_NAMES, MIGRATIONS_HASH_FILE } from '../scripts/bundle.ts';
import { Alarms } from './alarms.ts';
import { Database, type ExistingDatabase } from './database.ts';
import { type ConductorFunction, Functions, pascal } from './functions.ts';
import { type ExistingVpc, Network } from './network.ts';
import { createAppSecret } from './secrets.ts';

export { DB_NAME, type ExistingDatabase } from './database.ts';
export type { ConductorFunction } from './functions.ts';
export type { ExistingVpc } from './network.ts';
export { FUNCTION_NAMES };

/** The functions allowed to invoke compile (and told its name). */
export const COMPILE_INVOKERS = ['webhook', 'api', 'sweep'] as const satisfies ConductorFunction[];

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

    const network = new Network(this, {
      existingVpc: props.existingVpc,
      nat: props.nat ?? 'gateway',
    });
    this.functionsSecurityGroup = network.functionsSecurityGroup;
    this.appSecret = createAppSecret(this);
    const minCapacity = props.minCapacity ?? 0.5;
    const database = new Database(this, network, {
      existingDatabase: props.existingDatabase,
      minCapacity,
      maxCapacity: props.maxCapacity ?? 4,
      autoPauseAfter: props.autoPauseAfter ?? Duration.minutes(5),
      postgresVersion: props.postgresVersion,
      proxy: props.proxy ?? true,
      deletionProtection: props.deletionProtection ?? true,
    });
    this.cluster = database.cluster;
    this.proxy = database.proxy;
    this.dbSecret = database.secret;

    const functions = new Functions(this, {
      bundleDir,
      network,
      secrets: [this.dbSecret, this.appSecret],
      retention: props.logRetentionDays ?? logs.RetentionDays.ONE_MONTH,
      environment: {
        NODE_OPTIONS: '--enable-source-maps',
        CONDUCTOR_DB_SECRET_ARN: this.dbSecret.secretArn,
        CONDUCTOR_DB_HOST: database.host,
        CONDUCTOR_DB_NAME: database.name,
        CONDUCTOR_APP_SECRET_ARN: this.appSecret.secretArn,
        CONDUCTOR_GITHUB_API_URL: props.githubApiUrl ?? 'https://api.github.com',
        CONDUCTOR_LEASE_S: String(props.leaseSeconds ?? 45),
        CONDUCTOR_DB_POOL_MAX: String(props.dbPoolMax ?? 2),
        // RDS Proxy pins a session that prepares a statement to one database
        // connection; behind it the hot statements go unprepared.
        CONDUCTOR_DB_PREPARED_STATEMENTS: String(!this.proxy),
      },
    }).byName;
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

    this.httpApi = this.createHttpApi(functions);

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
    for (const c of database.dependables) migrations.node.addDependency(c);
    // New code runs only against a migrated schema.
    for (const name of FUNCTION_NAMES) {
      if (name !== 'migrate') functions[name].node.addDependency(migrations);
    }

    this.alarmTopic = new Alarms(this, {
      functions,
      httpApi: this.httpApi,
      compileFailures: this.compileFailures,
      namespace: `Conductor/${this.stackName}`,
      alarmEmail: props.alarmEmail,
    }).topic;

    new CfnOutput(this, 'ApiUrl', { value: this.httpApi.apiEndpoint });
    new CfnOutput(this, 'AppSecretArn', { value: this.appSecret.secretArn });
    new CfnOutput(this, 'DatabaseSecretArn', { value: this.dbSecret.secretArn });
    new CfnOutput(this, 'DatabaseHost', { value: database.host });
    new CfnOutput(this, 'MigrateFunctionName', { value: functions.migrate.functionName });
    new CfnOutput(this, 'CompileFailuresQueueUrl', { value: this.compileFailures.queueUrl });
    new CfnOutput(this, 'AlarmTopicArn', { value: this.alarmTopic.topicArn });
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
