// What the stack does with a setting left out: one table, applied by stack.ts
// and database.ts, documented in docs/deploy.md's settings table, and held to
// that table by test/docs-settings.test.ts. Settings without a fixed default
// (publicUrl: the API's own URL; alarmEmail, existingVpc, existingDatabase:
// none) are not here; stackName's default is in ContextSchema.
import { aws_logs as logs } from 'aws-cdk-lib';
import type { Context } from './context.ts';

/** Each setting's default, by its context name (`-c name=value`). */
export const SETTING_DEFAULTS = {
  sweepIntervalMinutes: 1,
  // 0 lets Aurora pause while idle (docs/deploy.md, "What it costs while idle").
  minCapacity: 0,
  maxCapacity: 4,
  autoPauseMinutes: 5,
  postgresVersion: '16.11',
  // The proxy keeps Aurora awake; small installs do without it.
  proxy: false,
  deletionProtection: true,
  nat: 'instance',
  githubApiUrl: 'https://api.github.com',
  leaseSeconds: 45,
  dbPoolMax: 2,
  logRetentionDays: logs.RetentionDays.ONE_MONTH,
  // Opt-in: the reservations add up to 154, which a new account's
  // concurrency limit (10 to 50; AWS keeps 100 unreserved) cannot hold.
  reservedConcurrency: false,
  outsideVpc: false,
  throttleRate: 50,
  throttleBurst: 100,
  // Opt-in: building the runner's image needs Docker at deploy.
  fargateRunners: false,
  githubApp: false,
  // On: an API Gateway WebSocket API and a Lambda cost nothing while no
  // runner connects, and about $0.03 a month per idle runner that does
  // (infra/cost.ts, pushChannelCost).
  pushChannel: true,
} as const satisfies { [K in keyof Context]?: Context[K] };
