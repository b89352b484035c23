// The alarms, on one SNS topic: failed functions, the API's 5xx, compiles
// that kept failing, and the sweep's repairs of stalled jobs.
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
import { FUNCTION_NAMES } from '../scripts/bundle.ts';
import { type ConductorFunction, pascal } from './functions.ts';

export interface AlarmsProps {
  functions: Record<ConductorFunction, lambda.Function>;
  httpApi: apigwv2.HttpApi;
  compileFailures: sqs.Queue;
  /** The metric namespace of the sweep's counts. */
  namespace: string;
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

    // Unhandled errors and timeouts; the HTTP handlers turn their own errors
    // into answers, which the API's 5xx alarm counts instead.
    for (const name of FUNCTION_NAMES) {
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

    // The sweep logs {"message":"sweep repaired", <counts>} when it repaired
    // anything (lib/app/sweep.ts). Metric filters turn the counts into metrics
    // without a change to the code; the alarm fires on the repairs that mean
    // a job was stalled (a settle, a promotion or a compile that was lost),
    // not on expired leases, which a runner that died explains.
    const sweepLogs = props.functions.sweep.logGroup;
    const counted = {
      SweepJobsSettled: 'jobs_settled',
      SweepTasksPromoted: 'tasks_promoted',
      SweepCompilesRedispatched: 'compiles_redispatched',
      SweepLeasesExpired: 'leases_expired',
      SweepErrors: 'errors',
    } as const;
    const metrics = {} as Record<keyof typeof counted, cloudwatch.Metric>;
    for (const [metricName, field] of Object.entries(counted) as [keyof typeof counted, string][]) {
      const filter = new logs.MetricFilter(scope, `${metricName}Filter`, {
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
