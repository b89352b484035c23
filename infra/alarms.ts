// The alarms, on one SNS topic: failed functions, the API's 5xx, compiles
// that kept failing, the sweep's repairs of stalled jobs, and an Aurora
// that never pauses.
import {
  type aws_apigatewayv2 as apigwv2,
  aws_cloudwatch as cloudwatch,
  aws_cloudwatch_actions as cloudwatchActions,
  Duration,
  type aws_lambda as lambda,
  aws_logs as logs,
  aws_sns as sns,
  type aws_sqs as sqs,
  aws_sns_subscriptions as subscriptions,
} from 'aws-cdk-lib';
import type { Construct } from 'constructs';
import { type ConductorFunction, pascal } from './functions.ts';

export interface AlarmsProps {
  functions: Record<ConductorFunction, lambda.Function>;
  httpApi: apigwv2.HttpApi;
  compileFailures: sqs.Queue;
  webhookDeadLetters: sqs.Queue;
  /** The metric namespace of the sweep's counts. */
  namespace: string;
  /** The Aurora cluster, when it may pause (minCapacity 0): an alarm when it has not for a day. */
  pausingCluster?: string;
  alarmEmail?: string;
}

/** The alarm topic and every alarm on it. */
export class Alarms {
  readonly topic: sns.Topic;

  constructor(scope: Construct, props: AlarmsProps) {
    this.topic = new sns.Topic(scope, 'Alarms', { displayName: 'Conductor alarms' });
    if (props.alarmEmail) {
      this.topic.addSubscription(new subscriptions.EmailSubscription(props.alarmEmail));
    }
    const action = new cloudwatchActions.SnsAction(this.topic);
    const alarm = (id: string, metric: cloudwatch.IMetric, description: string) => {
      const a = new cloudwatch.Alarm(scope, id, {
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

    // Alarms are billed by the metric ($0.10 a month each), so each failure
    // is watched once, where it lasts: an HTTP function's failures and
    // timeouts are the API's 5xx; compile's and the webhook consumer's land
    // in their queues after the retries; migrate's fail the deploy. Only the
    // sweep, which nothing retries, has an alarm on its errors.
    for (const name of ['sweep'] as const satisfies ConductorFunction[]) {
      alarm(
        `${pascal(name)}ErrorsAlarm`,
        props.functions[name].metricErrors(fiveMinutes),
        `Conductor ${name}: the function failed (an unhandled error or a timeout)`,
      );
    }
    alarm(
      'ApiServerErrorsAlarm',
      props.httpApi.metricServerError(fiveMinutes),
      'Conductor API answered 5xx: an internal error, or a function that failed or timed out',
    );
    alarm(
      'CompileFailuresAlarm',
      props.compileFailures.metricApproximateNumberOfMessagesVisible({
        period: Duration.minutes(5),
        statistic: cloudwatch.Stats.MAXIMUM,
      }),
      'Conductor compile: async invocations failed three times (the sweep re-dispatches the jobs)',
    );

    alarm(
      'WebhookDeadLettersAlarm',
      props.webhookDeadLetters.metricApproximateNumberOfMessagesVisible({
        period: Duration.minutes(5),
        statistic: cloudwatch.Stats.MAXIMUM,
      }),
      'Conductor webhooks: a queued delivery failed five times and waits in the dead-letter queue (redrive it once the cause is fixed)',
    );

    // The sweep logs {"message":"sweep repaired", <counts>} when it repaired
    // anything (lib/app/sweep.ts). Metric filters turn the counts into metrics
    // without a change to the code; the alarm fires on the repairs that mean
    // a job was stalled (a settle, a promotion or a compile that was lost),
    // not on expired leases, which a runner that died explains.
    const sweepLogs = props.functions.sweep.logGroup;
    // The three repairs of stalled jobs all count into one metric (one
    // filter each), so their alarm watches one metric, not a sum of three.
    const counted = [
      ['SweepJobsSettled', 'SweepStalledRepairs', 'jobs_settled'],
      ['SweepTasksPromoted', 'SweepStalledRepairs', 'tasks_promoted'],
      ['SweepCompilesRedispatched', 'SweepStalledRepairs', 'compiles_redispatched'],
      ['SweepLeasesExpired', 'SweepLeasesExpired', 'leases_expired'],
      ['SweepErrors', 'SweepErrors', 'errors'],
    ] as const;
    const metrics: Record<string, cloudwatch.Metric> = {};
    for (const [id, metricName, field] of counted) {
      const filter = new logs.MetricFilter(scope, `${id}Filter`, {
        logGroup: sweepLogs,
        filterPattern: logs.FilterPattern.stringValue('$.message', '=', 'sweep repaired'),
        metricNamespace: props.namespace,
        metricName,
        metricValue: `$.${field}`,
        // No default value: no data while nothing needs repairing (custom
        // metrics are billed by the hours they receive data).
      });
      metrics[metricName] = filter.metric(fiveMinutes);
    }
    alarm(
      'SweepRepairedStalledJobsAlarm',
      metrics.SweepStalledRepairs!,
      'Conductor sweep repaired stalled jobs (a lost settle, promotion or compile): look for the errors before it',
    );
    if (props.pausingCluster) {
      // Idle means Aurora paused (docs/deploy.md, "The idle gate"): awake for
      // 24 hours on end is work that never ends, or something waking it.
      const a = new cloudwatch.Alarm(scope, 'AuroraNeverPausedAlarm', {
        metric: new cloudwatch.Metric({
          namespace: 'AWS/RDS',
          metricName: 'ServerlessDatabaseCapacity',
          dimensionsMap: { DBClusterIdentifier: props.pausingCluster },
          period: Duration.hours(1),
          statistic: cloudwatch.Stats.MINIMUM,
        }),
        threshold: 0,
        evaluationPeriods: 24,
        datapointsToAlarm: 24,
        comparisonOperator: cloudwatch.ComparisonOperator.GREATER_THAN_THRESHOLD,
        treatMissingData: cloudwatch.TreatMissingData.NOT_BREACHING,
        alarmDescription:
          'Conductor: Aurora has not paused for 24 hours (work that never ends, or something that keeps connecting: see docs/deploy.md, "The idle gate")',
      });
      a.addAlarmAction(action);
    }
    alarm(
      'SweepRepairErrorsAlarm',
      metrics.SweepErrors!,
      'Conductor sweep: a repair failed (the sweep logged it and went on)',
    );
  }
}
