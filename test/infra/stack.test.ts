import assert from 'node:assert/strict';
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, test } from 'node:test';
import type { aws_iam as iam } from 'aws-cdk-lib';
import { App, Duration } from 'aws-cdk-lib';
import { Annotations, Match } from 'aws-cdk-lib/assertions';
import { COMPILE_INVOKERS, ConductorStack, FUNCTION_NAMES } from '../../infra/stack.ts';
import { ROUTES, routeKey } from '../../lib/http/routes.ts';
import {
  asList,
  logicalId,
  policyStatements,
  type Resource,
  resourcesOf,
  type Synthesised,
  stubBundles,
  synth,
  type TemplateJson,
} from './support.ts';

const bundles = stubBundles();
// Synthesised once per shape and shared by the tests that only read it.
const byDefault = synth(bundles);
const noProxy = synth(bundles, { proxy: false });

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

function routesByKey(s: Synthesised): Map<string, Resource> {
  return new Map(
    resourcesOf(s.json, 'AWS::ApiGatewayV2::Route').map(([, r]) => [
      r.Properties.RouteKey as string,
      r,
    ]),
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
    const invokable = resourcesOf(byDefault.json, 'AWS::Lambda::Permission')
      .filter(([, p]) => p.Properties.Principal === 'apigateway.amazonaws.com')
      .map(([, p]) =>
        functionIds(byDefault).get(
          (p.Properties.FunctionName as { 'Fn::GetAtt': string[] })['Fn::GetAtt'][0]!,
        ),
      );
    assert.deepEqual(new Set(invokable), routed);
  });
});

describe('the sweep', () => {
  test('an EventBridge schedule runs the sweep every minute', () => {
    const sweepId = logicalId(byDefault.stack, byDefault.stack.functions.sweep);
    byDefault.template.hasResourceProperties('AWS::Events::Rule', {
      ScheduleExpression: 'rate(1 minute)',
      State: 'ENABLED',
      Targets: [Match.objectLike({ Arn: { 'Fn::GetAtt': [sweepId, 'Arn'] } })],
    });
    assert.equal(resourcesOf(byDefault.json, 'AWS::Events::Rule').length, 1);
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
      assert.match(JSON.stringify(statement.Resource), new RegExp(`"${compileId}"`));
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
    assert.deepEqual(senders, ['compile']);
  });
});

describe('IAM', () => {
  const DATA_SERVICES = ['secretsmanager', 'rds', 'rds-db', 'sqs', 'lambda', 'kms', 's3', 'sns'];

  for (const [shape, s] of [
    ['with the proxy', byDefault],
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

  test('each function reads exactly the two secrets, and writes only its own logs', () => {
    const { stack } = byDefault;
    const secrets = [
      { Ref: logicalId(stack, stack.dbSecret as never) },
      { Ref: logicalId(stack, stack.appSecret) },
    ];
    for (const name of FUNCTION_NAMES) {
      const roleId = logicalId(stack, stack.functions[name].role as iam.Role);
      const mine = policyStatements(byDefault.json).filter(({ roles }) => roles.includes(roleId));
      const reads = mine.filter(({ statement }) =>
        asList(statement.Action).some((a) => a.startsWith('secretsmanager:')),
      );
      assert.equal(reads.length, 1, name);
      assert.deepEqual(asList(reads[0]!.statement.Action), ['secretsmanager:GetSecretValue']);
      assert.deepEqual(reads[0]!.statement.Resource, secrets, name);
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

  test('lets in the proxy only, and the proxy lets in the functions only', () => {
    const { stack, json, template } = byDefault;
    const fns = logicalId(stack, stack.functionsSecurityGroup);
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
      groupRef(logicalId(stack, stack.functionsSecurityGroup)),
    );
  });

  test('is Aurora PostgreSQL 16 Serverless v2 at 0.5 to 4 ACUs, encrypted, kept on delete', () => {
    byDefault.template.hasResource('AWS::RDS::DBCluster', {
      Properties: Match.objectLike({
        Engine: 'aurora-postgresql',
        EngineVersion: Match.stringLikeRegexp('^16\\.'),
        DatabaseName: 'conductor',
        StorageEncrypted: true,
        DeletionProtection: true,
        ServerlessV2ScalingConfiguration: { MinCapacity: 0.5, MaxCapacity: 4 },
      }),
      DeletionPolicy: 'Snapshot',
    });
  });

  test('minimum capacity 0 turns on auto-pause, and warns when the proxy would keep it awake', () => {
    const paused = synth(bundles, { minCapacity: 0, proxy: false });
    paused.template.hasResourceProperties('AWS::RDS::DBCluster', {
      ServerlessV2ScalingConfiguration: {
        MinCapacity: 0,
        MaxCapacity: 4,
        SecondsUntilAutoPause: 300,
      },
    });
    Annotations.fromStack(paused.stack).hasNoWarning('*', Match.stringLikeRegexp('does not pause'));
    const withProxy = synth(bundles, { minCapacity: 0 });
    Annotations.fromStack(withProxy.stack).hasWarning(
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
    const proxyId = logicalId(stack, stack.proxy!);
    for (const name of FUNCTION_NAMES) {
      const env = envOf(byDefault, name);
      assert.deepEqual(env.CONDUCTOR_DB_SECRET_ARN, {
        Ref: logicalId(stack, stack.dbSecret as never),
      });
      assert.deepEqual(env.CONDUCTOR_DB_HOST, { 'Fn::GetAtt': [proxyId, 'Endpoint'] });
      assert.equal(env.CONDUCTOR_DB_NAME, 'conductor');
      assert.deepEqual(env.CONDUCTOR_APP_SECRET_ARN, { Ref: logicalId(stack, stack.appSecret) });
      assert.equal(env.CONDUCTOR_GITHUB_API_URL, 'https://api.github.com');
      assert.equal(env.CONDUCTOR_LEASE_S, '45');
      assert.equal(env.CONDUCTOR_DB_POOL_MAX, '2');
      // Behind RDS Proxy a prepared statement would pin the session.
      assert.equal(env.CONDUCTOR_DB_PREPARED_STATEMENTS, 'false');
      assert.equal(env.NODE_OPTIONS, '--enable-source-maps');
      for (const key of ['DATABASE_URL', 'CONDUCTOR_ADMIN_TOKEN', 'CONDUCTOR_SECRET_KEY']) {
        assert.equal(env[key], undefined, `${name} has ${key}`);
      }
    }
    // Without the proxy the functions connect to the cluster's endpoint.
    const env = envOf(noProxy, 'claim');
    assert.deepEqual(env.CONDUCTOR_DB_HOST, {
      'Fn::GetAtt': [logicalId(noProxy.stack, noProxy.stack.cluster!), 'Endpoint.Address'],
    });
    assert.equal(env.CONDUCTOR_DB_PREPARED_STATEMENTS, 'true');
  });

  test('the app secret is generated by Secrets Manager; no value is in the template', () => {
    const text = JSON.stringify(byDefault.json);
    const app = byDefault.json.Resources[logicalId(byDefault.stack, byDefault.stack.appSecret)]!;
    const generate = app.Properties.GenerateSecretString as Record<string, unknown>;
    assert.equal(generate.GenerateStringKey, 'admin_token');
    assert.match(
      JSON.stringify(generate.SecretStringTemplate),
      /secret_key.*\{\{resolve:secretsmanager:/,
    );
    assert.doesNotMatch(text, /"SecretString"\s*:/);
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
    const target = resourcesOf(json, 'AWS::RDS::DBProxyTargetGroup')[0]![0];
    assert.ok(migrations.DependsOn?.includes(instance));
    assert.ok(migrations.DependsOn?.includes(target));
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
  test("each function's errors, the API's 5xx, failed compiles and stalled jobs raise an alarm", () => {
    const alarms = resourcesOf(byDefault.json, 'AWS::CloudWatch::Alarm');
    const topic = { Ref: logicalId(byDefault.stack, byDefault.stack.alarmTopic) };
    for (const [id, alarm] of alarms) assert.deepEqual(alarm.Properties.AlarmActions, [topic], id);
    const onErrors = alarms.filter(([, a]) => a.Properties.MetricName === 'Errors');
    assert.equal(onErrors.length, FUNCTION_NAMES.length);
    assert.ok(alarms.some(([, a]) => a.Properties.MetricName === '5xx'));
    assert.ok(
      alarms.some(([, a]) => a.Properties.MetricName === 'ApproximateNumberOfMessagesVisible'),
    );
    const stalled = alarms.find(([id]) => id.startsWith('SweepRepairedStalledJobs'));
    assert.ok(stalled, 'no alarm on stalled jobs');
    assert.match(
      JSON.stringify(stalled[1].Properties.Metrics),
      /settled \+ promoted \+ redispatched/,
    );
  });

  test("the sweep's repair counts become metrics from its log line", () => {
    const { stack, template } = byDefault;
    const sweepLogs = { Ref: logicalId(stack, stack.functions.sweep.logGroup as never) };
    for (const [metric, field] of [
      ['SweepJobsSettled', 'jobs_settled'],
      ['SweepTasksPromoted', 'tasks_promoted'],
      ['SweepCompilesRedispatched', 'compiles_redispatched'],
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

describe('existing resources', () => {
  const existingProps = {
    existingVpc: {
      vpcId: 'vpc-0123456789abcdef0',
      availabilityZones: ['eu-west-1a', 'eu-west-1b'],
      privateSubnetIds: ['subnet-0aaaaaaaaaaaaaaa1', 'subnet-0aaaaaaaaaaaaaaa2'],
    },
    existingDatabase: {
      secretArn: 'arn:aws:secretsmanager:eu-west-1:123456789012:secret:conductor-db-AbCdEf',
      host: 'db.internal.example',
      securityGroupId: 'sg-0123456789abcdef0',
    },
  };
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
      SourceSecurityGroupId: groupRef(logicalId(stack, stack.functionsSecurityGroup)),
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
