import assert from 'node:assert/strict';
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, test } from 'node:test';
import type { aws_iam as iam } from 'aws-cdk-lib';
import { App, Duration } from 'aws-cdk-lib';
import { Annotations, Match } from 'aws-cdk-lib/assertions';
import {
  CHANNEL_HINTERS,
  COMPILE_INVOKERS,
  ConductorStack,
  FUNCTION_NAMES,
} from '../../infra/stack.ts';
import { ROUTES, routeKey } from '../../lib/http/routes.ts';
import {
  asList,
  EXISTING_RESOURCES,
  logicalId,
  policyStatements,
  type Resource,
  resourcesOf,
  type Synthesised,
  stubBundles,
  synth,
  type TemplateJson,
  validatedSynth,
} from './support.ts';

const bundles = stubBundles();
// Synthesised once per shape and shared by the tests that only read it.
const byDefault = synth(bundles);
// The option that puts RDS Proxy in front (at 0.5 ACU, which the proxy keeps awake anyway).
const withProxy = synth(bundles, { proxy: true, minCapacity: 0.5 });
const noProxy = byDefault;

const functionIds = ({ stack }: Synthesised) =>
  new Map(FUNCTION_NAMES.map((name) => [logicalId(stack, stack.functions[name]), name]));
const roleIds = ({ stack }: Synthesised) =>
  new Map(
    FUNCTION_NAMES.map((name) => [logicalId(stack, stack.functions[name].role as iam.Role), name]),
  );

/** The function a route's integration invokes, by name. */
function integratedFunction(s: Synthesised, route: Resource): string | undefined {
  const target = route.Properties.Target as { 'Fn::Join': [string, [string, { Ref: string }]] };
  const integrationId = target['Fn::Join'][1][1].Ref;
  const integration = s.json.Resources[integrationId]!;
  const uri = integration.Properties.IntegrationUri as { 'Fn::GetAtt': [string, string] };
  return functionIds(s).get(uri['Fn::GetAtt'][0]);
}

/** The routes of one API (the HTTP API by default), by route key. */
function routesByKey(
  s: Synthesised,
  apiId = logicalId(s.stack, s.stack.httpApi),
): Map<string, Resource> {
  return new Map(
    resourcesOf(s.json, 'AWS::ApiGatewayV2::Route')
      .filter(([, r]) => JSON.stringify(r.Properties.ApiId) === JSON.stringify({ Ref: apiId }))
      .map(([, r]) => [r.Properties.RouteKey as string, r]),
  );
}

/** The functions API Gateway may invoke for one API, by name. */
function invokableBy(s: Synthesised, apiId: string): Set<string | undefined> {
  return new Set(
    resourcesOf(s.json, 'AWS::Lambda::Permission')
      .filter(([, p]) => p.Properties.Principal === 'apigateway.amazonaws.com')
      .filter(([, p]) => JSON.stringify(p.Properties.SourceArn).includes(`{"Ref":"${apiId}"}`))
      .map(([, p]) =>
        functionIds(s).get(
          (p.Properties.FunctionName as { 'Fn::GetAtt': string[] })['Fn::GetAtt'][0]!,
        ),
      ),
  );
}

/** Every ingress rule of a security group, inline or as its own resource. */
function ingressOf(json: TemplateJson, groupId: string): Record<string, unknown>[] {
  const inline = (json.Resources[groupId]?.Properties.SecurityGroupIngress ?? []) as Record<
    string,
    unknown
  >[];
  const separate = resourcesOf(json, 'AWS::EC2::SecurityGroupIngress')
    .map(([, r]) => r.Properties ?? {})
    .filter(
      (p) => JSON.stringify(p.GroupId) === JSON.stringify({ 'Fn::GetAtt': [groupId, 'GroupId'] }),
    );
  return [...inline, ...separate];
}

const groupRef = (id: string) => ({ 'Fn::GetAtt': [id, 'GroupId'] });

describe('the HTTP API', () => {
  test('every route of the contract goes to the function that serves it, as in lib/http/routes.ts', () => {
    const routes = routesByKey(byDefault);
    for (const route of ROUTES) {
      const deployed = routes.get(routeKey(route));
      assert.ok(deployed, `no route ${routeKey(route)}`);
      assert.equal(integratedFunction(byDefault, deployed), route.fn, routeKey(route));
    }
    // The table's routes and $default, nothing else.
    assert.equal(routes.size, ROUTES.length + 1);
  });

  test('any other route reaches the api function, which answers the JSON 404', () => {
    const fallback = routesByKey(byDefault).get('$default');
    assert.ok(fallback, 'no $default route');
    assert.equal(integratedFunction(byDefault, fallback), 'api');
  });

  test('API Gateway may invoke exactly the functions that serve routes', () => {
    const routed = new Set(ROUTES.map((r) => r.fn));
    const httpApi = logicalId(byDefault.stack, byDefault.stack.httpApi);
    assert.deepEqual(invokableBy(byDefault, httpApi), routed);
    // Every permission API Gateway has is the HTTP API's or the channel's.
    const channelApi = logicalId(byDefault.stack, byDefault.stack.channelApi!);
    const all = resourcesOf(byDefault.json, 'AWS::Lambda::Permission').filter(
      ([, p]) => p.Properties.Principal === 'apigateway.amazonaws.com',
    );
    for (const [id, p] of all) {
      const arn = JSON.stringify(p.Properties.SourceArn);
      assert.ok(arn.includes(httpApi) || arn.includes(channelApi), id);
    }
  });
});

describe('the sweep', () => {
  test('an EventBridge schedule runs the sweep every minute, and once a week past the idle gate', () => {
    const sweepId = logicalId(byDefault.stack, byDefault.stack.functions.sweep);
    byDefault.template.hasResourceProperties('AWS::Events::Rule', {
      ScheduleExpression: 'rate(1 minute)',
      State: 'ENABLED',
      Targets: [Match.objectLike({ Arn: { 'Fn::GetAtt': [sweepId, 'Arn'] } })],
    });
    byDefault.template.hasResourceProperties('AWS::Events::Rule', {
      ScheduleExpression: 'rate(7 days)',
      Targets: [
        Match.objectLike({
          Arn: { 'Fn::GetAtt': [sweepId, 'Arn'] },
          Input: JSON.stringify({ conductor: 'daily' }),
        }),
      ],
    });
    assert.equal(resourcesOf(byDefault.json, 'AWS::Events::Rule').length, 2);
  });

  test('the schedule is a stack setting', () => {
    const { template } = synth(bundles, { sweepInterval: Duration.minutes(5) });
    template.hasResourceProperties('AWS::Events::Rule', { ScheduleExpression: 'rate(5 minutes)' });
  });
});

describe('compile', () => {
  test('only webhook, api and sweep may invoke compile, and only they are told its name', () => {
    const compileId = logicalId(byDefault.stack, byDefault.stack.functions.compile);
    const roles = roleIds(byDefault);
    const invokers = new Set<string>();
    for (const { roles: attached, statement } of policyStatements(byDefault.json)) {
      if (statement.Effect !== 'Allow') continue;
      if (!asList(statement.Action).some((a) => a.startsWith('lambda:'))) continue;
      assert.deepEqual(asList(statement.Action), ['lambda:InvokeFunction']);
      // The webhook function also invokes the webhook queue's consumer (asserted below).
      if (!JSON.stringify(statement.Resource).includes(`"${compileId}"`)) continue;
      for (const role of attached) invokers.add(roles.get(role) ?? role);
    }
    assert.deepEqual([...invokers].sort(), [...COMPILE_INVOKERS].sort());

    // No resource policy lets anything else (a service, another account) invoke it.
    const permissions = resourcesOf(byDefault.json, 'AWS::Lambda::Permission').filter(([, p]) =>
      JSON.stringify(p.Properties.FunctionName).includes(`"${compileId}"`),
    );
    assert.deepEqual(permissions, []);

    for (const name of FUNCTION_NAMES) {
      const env = envOf(byDefault, name);
      if ((COMPILE_INVOKERS as readonly string[]).includes(name)) {
        assert.deepEqual(env.CONDUCTOR_COMPILE_FUNCTION, { Ref: compileId }, name);
      } else {
        assert.equal(env.CONDUCTOR_COMPILE_FUNCTION, undefined, name);
      }
    }
  });

  test('async invocations of compile that keep failing land in a queue', () => {
    const { stack, template } = byDefault;
    const queueId = logicalId(stack, stack.compileFailures);
    template.hasResourceProperties('AWS::Lambda::EventInvokeConfig', {
      FunctionName: { Ref: logicalId(stack, stack.functions.compile) },
      MaximumRetryAttempts: 2,
      DestinationConfig: { OnFailure: { Destination: { 'Fn::GetAtt': [queueId, 'Arn'] } } },
    });
    const senders = policyStatements(byDefault.json)
      .filter(({ statement }) => asList(statement.Action).includes('sqs:SendMessage'))
      .flatMap(({ roles }) => roles.map((r) => roleIds(byDefault).get(r)));
    // compile to its failure queue; the webhook queue's consumer to the dead letters.
    assert.deepEqual(senders.sort(), ['compile', 'webhookQueue']);
  });
});

describe('IAM', () => {
  const DATA_SERVICES = ['secretsmanager', 'rds', 'rds-db', 'sqs', 'lambda', 'kms', 's3', 'sns'];

  for (const [shape, s] of [
    ['with the proxy', withProxy],
    ['without the proxy', noProxy],
  ] as const) {
    test(`no statement allows every action, or a data resource by "*" (${shape})`, () => {
      for (const { statement } of policyStatements(s.json)) {
        if (statement.Effect !== 'Allow') continue;
        const actions = asList(statement.Action);
        for (const action of actions) {
          assert.notEqual(action, '*');
          assert.doesNotMatch(action, /:\*$/, `${action} allows a whole service`);
        }
        if (asList(statement.Resource as string | string[]).includes('*')) {
          for (const action of actions) {
            const service = action.split(':')[0]!;
            assert.ok(!DATA_SERVICES.includes(service), `${action} on "*"`);
          }
        }
      }
    });
  }

  test('no role carries a managed policy (they grant logs on every group)', () => {
    for (const [id, role] of resourcesOf(byDefault.json, 'AWS::IAM::Role')) {
      assert.equal(role.Properties.ManagedPolicyArns, undefined, id);
    }
  });

  test('each function reads only the secrets it uses, and writes only its own logs', () => {
    const { stack } = byDefault;
    const key = { Ref: logicalId(stack, stack.secretKey) };
    const admin = { Ref: logicalId(stack, stack.appSecret) };
    const owner = { Ref: logicalId(stack, stack.dbSecret as never) };
    const expected: Record<string, unknown[]> = {
      heartbeat: [],
      migrate: [owner],
      api: [key, admin],
    };
    for (const name of FUNCTION_NAMES) {
      const roleId = logicalId(stack, stack.functions[name].role as iam.Role);
      const mine = policyStatements(byDefault.json).filter(({ roles }) => roles.includes(roleId));
      const reads = mine
        .filter(({ statement }) =>
          asList(statement.Action).includes('secretsmanager:GetSecretValue'),
        )
        .flatMap(({ statement }) => asList(statement.Resource as unknown[]));
      assert.deepEqual(reads, expected[name] ?? [key], name);
      const logs = mine.filter(({ statement }) =>
        asList(statement.Action).some((a) => a.startsWith('logs:')),
      );
      assert.deepEqual(
        logs.map(({ statement }) => statement.Resource),
        [{ 'Fn::GetAtt': [logicalId(stack, stack.functions[name].logGroup as never), 'Arn'] }],
        name,
      );
    }
  });
});

describe('the database', () => {
  test('is not publicly accessible, and lives in subnets with no route out', () => {
    const { json, template } = byDefault;
    template.hasResourceProperties('AWS::RDS::DBInstance', {
      PubliclyAccessible: false,
      DBInstanceClass: 'db.serverless',
    });
    const [, subnetGroup] = resourcesOf(json, 'AWS::RDS::DBSubnetGroup')[0]!;
    const subnets = (subnetGroup.Properties.SubnetIds as { Ref: string }[]).map((s) => s.Ref);
    assert.equal(subnets.length, 2);
    const routeTables = resourcesOf(json, 'AWS::EC2::SubnetRouteTableAssociation')
      .filter(([, a]) => subnets.includes((a.Properties.SubnetId as { Ref: string }).Ref))
      .map(([, a]) => (a.Properties.RouteTableId as { Ref: string }).Ref);
    assert.equal(routeTables.length, 2);
    for (const [, route] of resourcesOf(json, 'AWS::EC2::Route')) {
      assert.ok(
        !routeTables.includes((route.Properties.RouteTableId as { Ref: string }).Ref),
        'a database subnet has a route to a gateway',
      );
    }
    for (const subnet of subnets) {
      assert.equal(json.Resources[subnet]!.Properties.MapPublicIpOnLaunch, false);
    }
  });

  test('with the proxy, lets in the proxy only, and the proxy lets in the functions only', () => {
    const { stack, json, template } = withProxy;
    const fns = logicalId(stack, stack.functionsSecurityGroup!);
    const cluster = json.Resources[logicalId(stack, stack.cluster!)]!;
    const [dbGroup] = (cluster.Properties.VpcSecurityGroupIds as { 'Fn::GetAtt': string[] }[]).map(
      (g) => g['Fn::GetAtt'][0]!,
    );
    const proxy = json.Resources[logicalId(stack, stack.proxy!)]!;
    const [proxyGroup] = (proxy.Properties.VpcSecurityGroupIds as { 'Fn::GetAtt': string[] }[]).map(
      (g) => g['Fn::GetAtt'][0]!,
    );
    const dbRules = ingressOf(json, dbGroup!);
    assert.ok(dbRules.length > 0);
    for (const rule of dbRules) {
      assert.deepEqual(rule.SourceSecurityGroupId, groupRef(proxyGroup!));
      assert.equal(rule.CidrIp, undefined);
    }
    const proxyRules = ingressOf(json, proxyGroup!);
    assert.equal(proxyRules.length, 1);
    assert.deepEqual(proxyRules[0]!.SourceSecurityGroupId, groupRef(fns));
    assert.equal(proxyRules[0]!.FromPort, 5432);
    assert.equal(proxyRules[0]!.CidrIp, undefined);
    template.hasResourceProperties('AWS::RDS::DBProxy', {
      RequireTLS: true,
      EngineFamily: 'POSTGRESQL',
      // Unique per stack: two stacks in one region do not collide.
      DBProxyName: 'Conductor-proxy',
    });
  });

  test('without the proxy, lets in the functions only', () => {
    const { stack, json } = noProxy;
    assert.deepEqual(resourcesOf(json, 'AWS::RDS::DBProxy'), []);
    const cluster = json.Resources[logicalId(stack, stack.cluster!)]!;
    const [dbGroup] = (cluster.Properties.VpcSecurityGroupIds as { 'Fn::GetAtt': string[] }[]).map(
      (g) => g['Fn::GetAtt'][0]!,
    );
    const rules = ingressOf(json, dbGroup!);
    assert.equal(rules.length, 1);
    assert.deepEqual(
      rules[0]!.SourceSecurityGroupId,
      groupRef(logicalId(stack, stack.functionsSecurityGroup!)),
    );
  });

  test('is Aurora PostgreSQL 16 Serverless v2 from 0 to 4 ACUs, pausing after 5 minutes, encrypted, kept on delete', () => {
    byDefault.template.hasResource('AWS::RDS::DBCluster', {
      Properties: Match.objectLike({
        Engine: 'aurora-postgresql',
        EngineVersion: Match.stringLikeRegexp('^16\\.'),
        DatabaseName: 'conductor',
        StorageEncrypted: true,
        DeletionProtection: true,
        ServerlessV2ScalingConfiguration: {
          MinCapacity: 0,
          MaxCapacity: 4,
          SecondsUntilAutoPause: 300,
        },
        EnableIAMDatabaseAuthentication: true,
      }),
      DeletionPolicy: 'Snapshot',
    });
  });

  test('minimum capacity 0 turns on auto-pause, and warns when the proxy would keep it awake', () => {
    const paused = byDefault;
    paused.template.hasResourceProperties('AWS::RDS::DBCluster', {
      ServerlessV2ScalingConfiguration: {
        MinCapacity: 0,
        MaxCapacity: 4,
        SecondsUntilAutoPause: 300,
      },
    });
    Annotations.fromStack(paused.stack).hasNoWarning('*', Match.stringLikeRegexp('does not pause'));
    const pausedWithProxy = synth(bundles, { proxy: true });
    Annotations.fromStack(pausedWithProxy.stack).hasWarning(
      '*',
      Match.stringLikeRegexp('does not pause'),
    );
  });
});

/** A function's environment variables, by function name. */
function envOf(s: Synthesised, name: (typeof FUNCTION_NAMES)[number]): Record<string, unknown> {
  const fn = s.json.Resources[logicalId(s.stack, s.stack.functions[name])]!;
  return (fn.Properties.Environment as { Variables: Record<string, unknown> }).Variables;
}

describe('the functions', () => {
  test('every function runs Node.js 22 on arm64, and there is no other function', () => {
    const fns = resourcesOf(byDefault.json, 'AWS::Lambda::Function');
    assert.equal(fns.length, FUNCTION_NAMES.length);
    for (const [id, fn] of fns) {
      assert.equal(fn.Properties.Runtime, 'nodejs22.x', id);
      assert.deepEqual(fn.Properties.Architectures, ['arm64'], id);
      assert.equal(fn.Properties.Handler, 'index.handler', id);
    }
  });

  test('every function is told where the database and the secrets are, never what they hold', () => {
    const { stack } = byDefault;
    const clusterId = logicalId(stack, stack.cluster!);
    for (const name of FUNCTION_NAMES) {
      const env = envOf(byDefault, name);
      // The application role signs in with IAM tokens; only migrate has the owner's secret.
      if (name === 'migrate') {
        assert.deepEqual(env.CONDUCTOR_DB_SECRET_ARN, {
          Ref: logicalId(stack, stack.dbSecret as never),
        });
        assert.equal(env.CONDUCTOR_DB_APP_ROLE, 'conductor_app');
      } else {
        assert.equal(env.CONDUCTOR_DB_SECRET_ARN, undefined, name);
        assert.equal(env.CONDUCTOR_DB_IAM_USER, 'conductor_app', name);
      }
      assert.deepEqual(env.CONDUCTOR_DB_HOST, { 'Fn::GetAtt': [clusterId, 'Endpoint.Address'] });
      assert.equal(env.CONDUCTOR_DB_NAME, 'conductor');
      assert.equal(env.CONDUCTOR_DB_TLS, 'verify-full');
      assert.equal(env.NODE_EXTRA_CA_CERTS, '/var/runtime/ca-cert.pem');
      assert.deepEqual(
        env.CONDUCTOR_APP_SECRET_ARN,
        name === 'api' ? { Ref: logicalId(stack, stack.appSecret) } : undefined,
        name,
      );
      assert.equal(env.CONDUCTOR_GITHUB_API_URL, 'https://api.github.com');
      assert.equal(env.CONDUCTOR_LEASE_S, '45');
      assert.equal(env.CONDUCTOR_DB_POOL_MAX, '2');
      assert.equal(env.CONDUCTOR_DB_PREPARED_STATEMENTS, 'true');
      assert.equal(env.NODE_OPTIONS, '--enable-source-maps');
      for (const key of ['DATABASE_URL', 'CONDUCTOR_ADMIN_TOKEN', 'CONDUCTOR_SECRET_KEY']) {
        assert.equal(env[key], undefined, `${name} has ${key}`);
      }
    }
    // Behind RDS Proxy the functions connect to its endpoint with the
    // database secret, and a prepared statement would pin the session.
    const env = envOf(withProxy, 'claim');
    assert.deepEqual(env.CONDUCTOR_DB_HOST, {
      'Fn::GetAtt': [logicalId(withProxy.stack, withProxy.stack.proxy!), 'Endpoint'],
    });
    assert.deepEqual(env.CONDUCTOR_DB_SECRET_ARN, {
      Ref: logicalId(withProxy.stack, withProxy.stack.dbSecret as never),
    });
    assert.equal(env.CONDUCTOR_DB_PREPARED_STATEMENTS, 'false');
  });

  test('the secrets are generated by Secrets Manager; no value is in the template', () => {
    const text = JSON.stringify(byDefault.json);
    const app = byDefault.json.Resources[logicalId(byDefault.stack, byDefault.stack.appSecret)]!;
    const generate = app.Properties.GenerateSecretString as Record<string, unknown>;
    assert.equal(generate.GenerateStringKey, 'admin_token');
    // The app secret no longer carries the sealing key.
    assert.doesNotMatch(JSON.stringify(generate.SecretStringTemplate), /secret_key/);
    assert.doesNotMatch(text, /"SecretString"\s*:/);
  });

  test('reserved concurrency (opt-in) keeps every connection under max_connections, the sweep alone', () => {
    const reserving = synth(bundles, { reservedConcurrency: true });
    let connections = 0;
    for (const name of FUNCTION_NAMES) {
      const fn =
        reserving.json.Resources[logicalId(reserving.stack, reserving.stack.functions[name])]!;
      const reserved = fn.Properties.ReservedConcurrentExecutions as number;
      assert.ok(reserved >= 1, name);
      connections += reserved * 2;
    }
    assert.equal(
      reserving.json.Resources[logicalId(reserving.stack, reserving.stack.functions.sweep)]!
        .Properties.ReservedConcurrentExecutions,
      1,
    );
    // Aurora Serverless v2 at 4 ACU: max_connections 901; a tenth kept for people and migrations.
    assert.ok(connections <= 810, `${connections} connections`);
    assert.throws(() => synth(bundles, { dbPoolMax: 20, reservedConcurrency: true }), /over 810/);
  });

  test('logs are kept a month', () => {
    const groups = resourcesOf(byDefault.json, 'AWS::Logs::LogGroup');
    assert.equal(groups.length, FUNCTION_NAMES.length);
    for (const [, group] of groups) assert.equal(group.Properties.RetentionInDays, 30);
  });
});

describe('migrations', () => {
  test('a custom resource runs the migrate function before any other function is updated', () => {
    const { stack, json } = byDefault;
    const migrations = json.Resources.Migrations!;
    assert.equal(migrations.Type, 'Custom::ConductorMigrations');
    assert.deepEqual(migrations.Properties.ServiceToken, {
      'Fn::GetAtt': [logicalId(stack, stack.functions.migrate), 'Arn'],
    });
    // It waits for the writer instance and the proxy's target.
    const instance = resourcesOf(json, 'AWS::RDS::DBInstance')[0]![0];
    const target = resourcesOf(withProxy.json, 'AWS::RDS::DBProxyTargetGroup')[0]![0];
    assert.ok(withProxy.json.Resources.Migrations!.DependsOn?.includes(target));
    assert.ok(migrations.DependsOn?.includes(instance));
    for (const name of FUNCTION_NAMES) {
      const fn = json.Resources[logicalId(stack, stack.functions[name])]!;
      assert.equal(fn.DependsOn?.includes('Migrations') ?? false, name !== 'migrate', name);
    }
  });

  test('the custom resource changes, and so runs again, when any function code changes', () => {
    const before = byDefault.json.Resources.Migrations!.Properties!;
    const changed = stubBundles();
    writeFileSync(join(changed, 'claim', 'index.mjs'), 'export const handler = async () => 2;\n');
    const after = synth(changed).json.Resources.Migrations!.Properties!;
    assert.notEqual(after.CodeHash, before.CodeHash);
    assert.equal(after.MigrationsHash, before.MigrationsHash);
    assert.equal(
      synth(stubBundles()).json.Resources.Migrations!.Properties!.CodeHash,
      before.CodeHash,
    );
  });
});

describe('alarms', () => {
  test("the sweep's errors, the API's 5xx, failed compiles, dead webhooks and stalled jobs raise an alarm", () => {
    const alarms = resourcesOf(byDefault.json, 'AWS::CloudWatch::Alarm');
    const topic = { Ref: logicalId(byDefault.stack, byDefault.stack.alarmTopic) };
    for (const [id, alarm] of alarms) assert.deepEqual(alarm.Properties.AlarmActions, [topic], id);
    const onErrors = alarms.filter(([, a]) => a.Properties.MetricName === 'Errors');
    assert.deepEqual(
      onErrors.map(([id]) => id.replace(/Alarm.*$/, '')),
      ['SweepErrors'],
    );
    assert.ok(alarms.some(([, a]) => a.Properties.MetricName === '5xx'));
    const queues = alarms.filter(
      ([, a]) => a.Properties.MetricName === 'ApproximateNumberOfMessagesVisible',
    );
    assert.equal(queues.length, 2, 'compile failures and webhook dead letters');
    const stalled = alarms.find(([id]) => id.startsWith('SweepRepairedStalledJobs'));
    assert.ok(stalled, 'no alarm on stalled jobs');
    assert.equal(stalled[1].Properties.MetricName, 'SweepStalledRepairs');
    // Each watches one metric (alarms are billed by the metric).
    for (const [id, alarm] of alarms) assert.equal(alarm.Properties.Metrics, undefined, id);
  });

  test("the sweep's repair counts become metrics from its log line", () => {
    const { stack, template } = byDefault;
    const sweepLogs = { Ref: logicalId(stack, stack.functions.sweep.logGroup as never) };
    for (const [metric, field] of [
      ['SweepStalledRepairs', 'jobs_settled'],
      ['SweepStalledRepairs', 'tasks_promoted'],
      ['SweepStalledRepairs', 'compiles_redispatched'],
      ['SweepLeasesExpired', 'leases_expired'],
      ['SweepErrors', 'errors'],
    ]) {
      template.hasResourceProperties('AWS::Logs::MetricFilter', {
        LogGroupName: sweepLogs,
        FilterPattern: '{ $.message = "sweep repaired" }',
        MetricTransformations: [
          Match.objectLike({
            MetricName: metric,
            MetricValue: `$.${field}`,
            MetricNamespace: 'Conductor/Conductor',
          }),
        ],
      });
    }
  });
});

describe('idle', () => {
  test('no RDS Proxy, no NAT gateway: a t4g.nano NAT instance, and a gateway as the HA option', () => {
    assert.deepEqual(resourcesOf(byDefault.json, 'AWS::RDS::DBProxy'), []);
    assert.deepEqual(resourcesOf(byDefault.json, 'AWS::EC2::NatGateway'), []);
    byDefault.template.hasResourceProperties('AWS::EC2::Instance', { InstanceType: 't4g.nano' });
    const ha = synth(bundles, { nat: 'gateway' });
    assert.equal(resourcesOf(ha.json, 'AWS::EC2::NatGateway').length, 1);
  });

  test("the gate bucket is private, and only the gate's users reach its marker", () => {
    const { stack, json, template } = byDefault;
    template.hasResourceProperties('AWS::S3::Bucket', {
      PublicAccessBlockConfiguration: Match.objectLike({
        BlockPublicAcls: true,
        RestrictPublicBuckets: true,
      }),
    });
    const bucket = logicalId(stack, stack.gateBucket);
    const touching = new Map<string, Set<string>>();
    for (const { roles, statement } of policyStatements(json)) {
      if (!JSON.stringify(statement.Resource).includes('/gate/')) continue;
      assert.match(JSON.stringify(statement.Resource), new RegExp(bucket));
      for (const r of roles) {
        const name = roleIds(byDefault).get(r)!;
        const set = touching.get(name) ?? new Set();
        for (const a of asList(statement.Action)) set.add(a);
        touching.set(name, set);
      }
    }
    // Claims read the marker and the worker tokens (and may list, so that a
    // missing object answers 404, not 403); the sweep also closes the gate.
    assert.deepEqual([...touching.get('claim')!], ['s3:GetObject']);
    assert.deepEqual([...touching.get('sweep')!].sort(), [
      's3:DeleteObject',
      's3:GetObject',
      's3:PutObject',
    ]);
    assert.equal(touching.get('heartbeat'), undefined);
    // Listing the whole bucket; the push channel's hinters list `channel/` only (below).
    const listers = policyStatements(json)
      .filter(({ statement }) => asList(statement.Action).includes('s3:ListBucket'))
      .filter(({ statement }) => statement.Condition === undefined)
      .filter(({ statement }) => JSON.stringify(statement.Resource).includes(bucket))
      .flatMap(({ roles }) => roles.map((r) => roleIds(byDefault).get(r)));
    assert.deepEqual(listers.sort(), ['api', 'claim', 'sweep', 'webhook']);
    assert.equal(envOf(byDefault, 'claim').CONDUCTOR_GATE_BUCKET !== undefined, true);
  });

  test('webhooks: the consumer is invoked asynchronously, tried three times, then dead-lettered; no poller', () => {
    const { stack, template } = byDefault;
    template.resourceCountIs('AWS::Lambda::EventSourceMapping', 0);
    template.hasResourceProperties('AWS::Lambda::EventInvokeConfig', {
      FunctionName: { Ref: logicalId(stack, stack.functions.webhookQueue) },
      MaximumRetryAttempts: 2,
      MaximumEventAgeInSeconds: 6 * 3600,
      DestinationConfig: {
        OnFailure: {
          Destination: { 'Fn::GetAtt': [logicalId(stack, stack.webhookDeadLetters), 'Arn'] },
        },
      },
    });
    assert.deepEqual(envOf(byDefault, 'webhook').CONDUCTOR_WEBHOOK_CONSUMER, {
      Ref: logicalId(stack, stack.functions.webhookQueue),
    });
    assert.equal(envOf(byDefault, 'webhookQueue').CONDUCTOR_DB_CONNECT_TIMEOUT_MS, '60000');
  });

  test('the API stage is throttled, and the webhook routes have buckets of their own', () => {
    byDefault.template.hasResourceProperties('AWS::ApiGatewayV2::Stage', {
      DefaultRouteSettings: { ThrottlingRateLimit: 50, ThrottlingBurstLimit: 100 },
      RouteSettings: {
        'POST /v1/webhooks/github': { ThrottlingRateLimit: 50, ThrottlingBurstLimit: 100 },
        'POST /v1/webhooks/gitea': { ThrottlingRateLimit: 50, ThrottlingBurstLimit: 100 },
      },
    });
  });

  test('reserved concurrency is opt-in, and Aurora that never pauses has an alarm', () => {
    const fns = Object.values(
      byDefault.template.findResources('AWS::Lambda::Function') as Record<
        string,
        { Properties: { ReservedConcurrentExecutions?: number } }
      >,
    );
    assert.ok(fns.every((f) => f.Properties.ReservedConcurrentExecutions === undefined));
    byDefault.template.hasResourceProperties('AWS::CloudWatch::Alarm', {
      MetricName: 'ServerlessDatabaseCapacity',
      Statistic: 'Minimum',
      Period: 3600,
      EvaluationPeriods: 24,
      Threshold: 0,
    });
  });
});

const existingProps = EXISTING_RESOURCES;

describe('the push channel', () => {
  const { stack, json, template } = byDefault;
  const apiId = logicalId(stack, stack.channelApi!);
  const bucket = logicalId(stack, stack.gateBucket);
  const registry = { 'Fn::Join': ['', [{ 'Fn::GetAtt': [bucket, 'Arn'] }, '/channel/*']] };
  const stageUrl = (scheme: string) => ({
    'Fn::Join': [
      '',
      [
        `${scheme}://`,
        { Ref: apiId },
        '.execute-api.',
        { Ref: 'AWS::Region' },
        '.',
        { Ref: 'AWS::URLSuffix' },
        '/v1',
      ],
    ],
  });
  /** Each function's statements that touch the channel: execute-api, or the registry's keys. */
  const statementsOf = (s: Synthesised, name: (typeof FUNCTION_NAMES)[number]) => {
    const roleId = logicalId(s.stack, s.stack.functions[name].role as iam.Role);
    return policyStatements(s.json)
      .filter(({ roles }) => roles.includes(roleId))
      .map(({ statement }) => statement);
  };

  test('is on by default: a WebSocket API whose $connect, $disconnect and $default go to the channel function', () => {
    const apis = resourcesOf(json, 'AWS::ApiGatewayV2::Api').filter(
      ([, r]) => r.Properties.ProtocolType === 'WEBSOCKET',
    );
    assert.deepEqual(
      apis.map(([id]) => id),
      [apiId],
    );
    const routes = routesByKey(byDefault, apiId);
    assert.deepEqual([...routes.keys()].sort(), ['$connect', '$default', '$disconnect']);
    const channelFn = logicalId(stack, stack.functions.channel);
    for (const [key, route] of routes) {
      const target = route.Properties.Target as { 'Fn::Join': [string, [string, { Ref: string }]] };
      const integration = json.Resources[target['Fn::Join'][1][1].Ref]!;
      assert.equal(integration.Properties.IntegrationType, 'AWS_PROXY', key);
      assert.match(
        JSON.stringify(integration.Properties.IntegrationUri),
        new RegExp(channelFn),
        key,
      );
    }
    // API Gateway may invoke the channel function from this API, and nothing else.
    assert.deepEqual(invokableBy(byDefault, apiId), new Set(['channel']));
  });

  test('its stage v1 deploys on its own, is throttled, and its wss:// URL is an output', () => {
    template.hasResourceProperties('AWS::ApiGatewayV2::Stage', {
      ApiId: { Ref: apiId },
      StageName: 'v1',
      AutoDeploy: true,
      DefaultRouteSettings: { ThrottlingRateLimit: 50, ThrottlingBurstLimit: 100 },
    });
    template.hasOutput('ChannelUrl', { Value: stageUrl('wss') });
  });

  test('the functions that hint runners are told the stage: its wss:// URL and its https:// management endpoint', () => {
    for (const name of FUNCTION_NAMES) {
      const env = envOf(byDefault, name);
      const told = name === 'channel' || (CHANNEL_HINTERS as readonly string[]).includes(name);
      assert.deepEqual(env.CONDUCTOR_CHANNEL_URL, told ? stageUrl('wss') : undefined, name);
      assert.deepEqual(env.CONDUCTOR_CHANNEL_ENDPOINT, told ? stageUrl('https') : undefined, name);
    }
    // The registry is the gate's bucket: the hinters know it as the gate's, the channel function by name.
    assert.deepEqual(envOf(byDefault, 'channel').CONDUCTOR_CHANNEL_BUCKET, { Ref: bucket });
    assert.equal(envOf(byDefault, 'channel').CONDUCTOR_GATE_BUCKET, undefined);
    for (const name of CHANNEL_HINTERS) {
      assert.deepEqual(envOf(byDefault, name).CONDUCTOR_GATE_BUCKET, { Ref: bucket }, name);
    }
  });

  test('the hinters may post to connections of that stage only, and read, delete and list the registry only', () => {
    const connections = {
      'Fn::Join': [
        '',
        [
          'arn:',
          { Ref: 'AWS::Partition' },
          ':execute-api:',
          { Ref: 'AWS::Region' },
          ':',
          { Ref: 'AWS::AccountId' },
          ':',
          { Ref: apiId },
          '/v1/POST/@connections/*',
        ],
      ],
    };
    for (const name of FUNCTION_NAMES) {
      const mine = statementsOf(byDefault, name);
      const hinter = (CHANNEL_HINTERS as readonly string[]).includes(name);
      const posts = mine.filter((st) =>
        asList(st.Action).some((a) => a.startsWith('execute-api:')),
      );
      assert.deepEqual(
        posts.map((st) => [st.Action, st.Resource]),
        hinter ? [['execute-api:ManageConnections', connections]] : [],
        name,
      );
      const onRegistry = mine.filter((st) => JSON.stringify(st.Resource).includes('/channel/'));
      const expected =
        name === 'channel'
          ? [['s3:PutObject', 's3:DeleteObject']]
          : hinter
            ? [['s3:GetObject', 's3:DeleteObject']]
            : [];
      assert.deepEqual(
        onRegistry.map((st) => asList(st.Action)),
        expected,
        name,
      );
      for (const st of onRegistry) assert.deepEqual(st.Resource, registry, name);
      const prefixLists = mine.filter(
        (st) => asList(st.Action).includes('s3:ListBucket') && st.Condition !== undefined,
      );
      assert.deepEqual(
        prefixLists.map((st) => [st.Resource, st.Condition]),
        hinter
          ? [[{ 'Fn::GetAtt': [bucket, 'Arn'] }, { StringLike: { 's3:prefix': ['channel/*'] } }]]
          : [],
        name,
      );
    }
  });

  test('the channel function never reaches the database, and touches nothing of the bucket but the registry', () => {
    for (const s of [byDefault, withProxy]) {
      const mine = statementsOf(s, 'channel');
      const actions = mine.flatMap((st) => asList(st.Action));
      assert.ok(!actions.some((a) => a.startsWith('rds')), actions.join(' '));
      // The sealing key (tickets are signed with a key derived from it), never the database's secret.
      const secrets = mine
        .filter((st) => asList(st.Action).includes('secretsmanager:GetSecretValue'))
        .flatMap((st) => asList(st.Resource as unknown[]));
      assert.deepEqual(secrets, [{ Ref: logicalId(s.stack, s.stack.secretKey) }]);
      const s3 = mine.filter((st) => asList(st.Action).some((a) => a.startsWith('s3:')));
      assert.deepEqual(
        s3.map((st) => [asList(st.Action), st.Resource]),
        [[['s3:PutObject', 's3:DeleteObject'], registry]],
      );
      const env = envOf(s, 'channel');
      assert.equal(env.CONDUCTOR_DB_SECRET_ARN, undefined);
    }
  });

  test('pushChannel=false leaves the API out: nothing is told a channel or may post to one', () => {
    const without = synth(bundles, { pushChannel: false });
    assert.equal(without.stack.channelApi, undefined);
    assert.deepEqual(
      resourcesOf(without.json, 'AWS::ApiGatewayV2::Api').filter(
        ([, r]) => r.Properties.ProtocolType === 'WEBSOCKET',
      ),
      [],
    );
    for (const name of FUNCTION_NAMES) {
      assert.equal(envOf(without, name).CONDUCTOR_CHANNEL_URL, undefined, name);
    }
    const text = JSON.stringify(without.json);
    assert.doesNotMatch(text, /execute-api:ManageConnections/);
    assert.doesNotMatch(text, /\/channel\/\*/);
    assert.equal(
      (without.json as { Outputs?: Record<string, unknown> }).Outputs?.ChannelUrl,
      undefined,
    );
  });
});

describe('existing resources', () => {
  const existing = synth(bundles, existingProps);

  test('an existing VPC and database replace the created ones, with no lookup', () => {
    const { json, stack } = existing;
    for (const type of [
      'AWS::EC2::VPC',
      'AWS::RDS::DBCluster',
      'AWS::RDS::DBProxy',
      'AWS::EC2::NatGateway',
    ]) {
      assert.deepEqual(resourcesOf(json, type), [], type);
    }
    const env = envOf(existing, 'api');
    assert.equal(
      env.CONDUCTOR_DB_SECRET_ARN,
      'arn:aws:secretsmanager:eu-west-1:123456789012:secret:conductor-db-AbCdEf',
    );
    assert.equal(env.CONDUCTOR_DB_HOST, 'db.internal.example');
    const fn = json.Resources[logicalId(stack, stack.functions.api)]!;
    assert.deepEqual((fn.Properties.VpcConfig as { SubnetIds: string[] }).SubnetIds, [
      'subnet-0aaaaaaaaaaaaaaa1',
      'subnet-0aaaaaaaaaaaaaaa2',
    ]);
    existing.template.hasResourceProperties('AWS::EC2::SecurityGroupIngress', {
      GroupId: 'sg-0123456789abcdef0',
      FromPort: 5432,
      SourceSecurityGroupId: groupRef(logicalId(stack, stack.functionsSecurityGroup!)),
    });
  });

  test('synthesis needs no context lookup in any shape', () => {
    for (const props of [
      {},
      { nat: 'instance' as const },
      { proxy: false, minCapacity: 0 },
      existingProps,
    ]) {
      const app = new App({ analyticsReporting: false });
      new ConductorStack(app, 'Conductor', { bundleDir: bundles, ...props });
      assert.equal(app.synth().manifest.missing, undefined);
    }
  });
});

test("every shape passes synthesis' CloudFormation schema check, so `npm run synth` warns of nothing; the one rule acknowledged is the NAT instance's resolve:ssm ImageId, with its reason", () => {
  const shapes = {
    default: {},
    'proxy at 0.5 ACU': { proxy: true, minCapacity: 0.5 },
    'NAT gateway': { nat: 'gateway' as const },
    'existing VPC and database': existingProps,
    'outside any VPC': {
      outsideVpc: true,
      existingDatabase: { secretArn: existingProps.existingDatabase.secretArn, host: 'db.example' },
    },
  };
  for (const [shape, props] of Object.entries(shapes)) {
    const found = validatedSynth(bundles, props);
    assert.deepEqual(found.violations, [], shape);
    for (const ack of found.acknowledged) {
      assert.equal(ack.acknowledgedId, 'CloudFormation-Validate::E1152', shape);
      assert.match(ack.reason, /resolve:ssm/, shape);
    }
    const natInstance = shape === 'default' || shape === 'proxy at 0.5 ACU';
    assert.equal(found.acknowledged.length, natInstance ? 1 : 0, shape);
  }
});

describe('the GitHub App', () => {
  const withApp = synth(bundles, { githubApp: true });
  const resources = withApp.json.Resources as Record<string, { Type: string }>;
  const secretId = Object.keys(resources).find((id) => id.startsWith('GitHubAppSecret'));

  test('githubApp adds its secret, which only the functions that call GitHub may read, by ARN', () => {
    assert.ok(secretId, 'a GitHubAppSecret resource');
    assert.equal(resources[secretId]?.Type, 'AWS::SecretsManager::Secret');
    assert.equal(
      Object.keys(byDefault.json.Resources as object).some((id) =>
        id.startsWith('GitHubAppSecret'),
      ),
      false,
      'no app secret by default',
    );
    const readers = ['webhook', 'webhookQueue', 'api', 'compile', 'complete', 'sweep'];
    for (const name of FUNCTION_NAMES) {
      const env = envOf(withApp, name);
      const roleId = logicalId(withApp.stack, withApp.stack.functions[name].role as iam.Role);
      const reads = policyStatements(withApp.json)
        .filter(({ roles }) => roles.includes(roleId))
        .filter(({ statement }) =>
          asList(statement.Action).includes('secretsmanager:GetSecretValue'),
        )
        .flatMap(({ statement }) => asList(statement.Resource as unknown[]));
      const mayRead = readers.includes(name);
      assert.equal(
        reads.some((r) => JSON.stringify(r) === JSON.stringify({ Ref: secretId })),
        mayRead,
        name,
      );
      assert.deepEqual(
        env.CONDUCTOR_GITHUB_APP_SECRET_ARN,
        mayRead ? { Ref: secretId } : undefined,
        name,
      );
      for (const key of [
        'CONDUCTOR_GITHUB_APP_PRIVATE_KEY_FILE',
        'CONDUCTOR_GITHUB_APP_WEBHOOK_SECRET',
      ]) {
        assert.equal(env[key], undefined, `${name} has ${key}`);
      }
    }
  });
});
