// The database: Aurora PostgreSQL Serverless v2 (optionally behind RDS
// Proxy), or an existing PostgreSQL given by its secret and host.
import {
  Annotations,
  Duration,
  aws_ec2 as ec2,
  RemovalPolicy,
  aws_rds as rds,
  Stack,
  aws_secretsmanager as secretsmanager,
} from 'aws-cdk-lib';
import type { Construct } from 'constructs';
import type { Network } from './network.ts';

export const DB_NAME = 'conductor';
export const DB_PORT = 5432;
const DB_USER = 'conductor';

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

export interface DatabaseProps {
  existingDatabase?: ExistingDatabase;
  minCapacity: number;
  maxCapacity: number;
  autoPauseAfter: Duration;
  postgresVersion: string;
  proxy: boolean;
  deletionProtection: boolean;
}

/** The database the functions use, and what the migrations must wait for. */
export class Database {
  readonly secret: secretsmanager.ISecret;
  /** The host the functions connect to: the proxy's endpoint, the cluster's, or the given one. */
  readonly host: string;
  readonly name: string;
  readonly cluster?: rds.DatabaseCluster;
  readonly proxy?: rds.DatabaseProxy;
  /** Up before migrating: the cluster's writer and the proxy's target. */
  readonly dependables: Construct[] = [];

  constructor(scope: Construct, network: Network | undefined, props: DatabaseProps) {
    if (props.existingDatabase) {
      const existing = props.existingDatabase;
      this.secret = secretsmanager.Secret.fromSecretCompleteArn(
        scope,
        'DatabaseSecret',
        existing.secretArn,
      );
      this.host = existing.host;
      this.name = existing.dbName ?? DB_NAME;
      if (existing.securityGroupId) {
        if (!network) {
          throw new Error('existingDatabase.securityGroupId needs the functions in a VPC');
        }
        const group = ec2.SecurityGroup.fromSecurityGroupId(
          scope,
          'DatabaseSecurityGroup',
          existing.securityGroupId,
        );
        group.addIngressRule(
          network.functionsSecurityGroup,
          ec2.Port.tcp(existing.port ?? DB_PORT),
          'Conductor functions',
        );
      }
      return;
    }
    if (!network) throw new Error('Aurora needs the functions in a VPC');
    const { cluster, proxy } = createAurora(scope, network, props);
    this.cluster = cluster;
    this.proxy = proxy;
    this.secret = cluster.secret!;
    this.host = proxy ? proxy.endpoint : cluster.clusterEndpoint.hostname;
    this.name = DB_NAME;
    this.dependables.push(cluster);
    if (proxy) this.dependables.push(proxy);
  }
}

function createAurora(
  scope: Construct,
  network: Network,
  props: DatabaseProps,
): { cluster: rds.DatabaseCluster; proxy?: rds.DatabaseProxy } {
  const { vpc, databaseSubnets, functionSubnets, functionsSecurityGroup } = network;
  const minCapacity = props.minCapacity;
  const databaseGroup = new ec2.SecurityGroup(scope, 'DatabaseSecurityGroup', {
    vpc,
    description: 'Conductor database: only the functions (or the proxy) get in',
    allowAllOutbound: false,
  });
  const version = props.postgresVersion;
  const cluster = new rds.DatabaseCluster(scope, 'Database', {
    engine: rds.DatabaseClusterEngine.auroraPostgres({
      version: rds.AuroraPostgresEngineVersion.of(version, version.split('.')[0]!),
    }),
    // The generated secret: JSON with username, password, host, port, dbname.
    credentials: rds.Credentials.fromGeneratedSecret(DB_USER),
    defaultDatabaseName: DB_NAME,
    writer: rds.ClusterInstance.serverlessV2('writer', { publiclyAccessible: false }),
    serverlessV2MinCapacity: minCapacity,
    serverlessV2MaxCapacity: props.maxCapacity,
    serverlessV2AutoPauseDuration: minCapacity === 0 ? props.autoPauseAfter : undefined,
    vpc,
    vpcSubnets: databaseSubnets,
    securityGroups: [databaseGroup],
    port: DB_PORT,
    storageEncrypted: true,
    // The functions sign in as the application role with IAM tokens.
    iamAuthentication: true,
    backup: { retention: Duration.days(7) },
    deletionProtection: props.deletionProtection,
    removalPolicy: RemovalPolicy.SNAPSHOT,
  });
  if (minCapacity === 0 && props.proxy) {
    Annotations.of(scope).addWarningV2(
      'conductor:autoPauseWithProxy',
      'minCapacity 0 with RDS Proxy: the proxy keeps connections to the instance, so it does not pause; set proxy to false',
    );
  }
  if (!props.proxy) {
    databaseGroup.addIngressRule(
      functionsSecurityGroup,
      ec2.Port.tcp(DB_PORT),
      'Conductor functions',
    );
    return { cluster };
  }
  const proxyGroup = new ec2.SecurityGroup(scope, 'ProxySecurityGroup', {
    vpc,
    description: 'Conductor RDS Proxy: only the functions get in',
    allowAllOutbound: true,
  });
  proxyGroup.addIngressRule(functionsSecurityGroup, ec2.Port.tcp(DB_PORT), 'Conductor functions');
  // DatabaseProxy lets its own group into the cluster's group on the cluster's port.
  const proxy = new rds.DatabaseProxy(scope, 'Proxy', {
    // Unique per stack (a proxy's name is unique in the region).
    dbProxyName: `${Stack.of(scope).stackName}-proxy`,
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
