// The bill as a test: a monthly cost read from a synthesised template, at
// list prices. `node --import tsx infra/cost.ts [template.json]` prints it;
// test/infra/cost.test.ts holds the default to $10 a month idle, and the
// Fargate runners' task-minute and month.
import { readFileSync } from 'node:fs';
import { TOKEN_CACHE_MS } from '../lib/idle/workers.ts';
import { RUNNER_TASK_SIZE } from './fleet.ts';

/**
 * us-east-1 on-demand list prices, read from the AWS pricing pages on
 * 2026-06-01 (not fetched at run time; check them before relying on a
 * figure). A month is 730 hours.
 */
export const PRICES = {
  date: '2026-06-01',
  hoursPerMonth: 730,
  natGatewayHour: 0.045,
  publicIpv4Hour: 0.005,
  t4gNanoHour: 0.0042,
  ebsGp3GbMonth: 0.08,
  /** The AL2023 AMI's root volume. */
  natInstanceRootGb: 8,
  rdsProxyAcuHour: 0.015,
  /** RDS Proxy bills Aurora Serverless v2 at no less than 8 ACU. */
  rdsProxyMinAcu: 8,
  auroraAcuHour: 0.12,
  auroraStorageGbMonth: 0.1,
  /** Assumed size of a small Conductor database. */
  auroraStorageGb: 1,
  secretMonth: 0.4,
  alarmMetricMonth: 0.1,
  sqsPerMillion: 0.4,
  /** Lambda's SQS poller: five long polls of 20 s, around the clock. */
  sqsIdleReceivesMonth: 5 * 3 * 60 * 730,
  lambdaPerMillion: 0.2,
  lambdaArmGbSecond: 0.0000133334,
  httpApiPerMillion: 1.0,
  s3GetPerThousand: 0.0004,
  s3PutPerThousand: 0.005,
  logsIngestGb: 0.5,
  /** What Lambda writes of each invocation as TEXT (START, END, REPORT lines). */
  platformLogBytes: 350,
  /** The reference runner's idle poll: backoff up to 10 s, jitter downwards (runner/backoff.ts). */
  runnerPollS: 9,
  /** A claim answered by a closed gate: billed milliseconds. */
  closedClaimMs: 20,
  /** How often Lambda replaces a claim container (every few hours). */
  containerTurnoversPerDay: 6,
  /** One wake: ~6 minutes at 0.5 ACU until auto-pause. */
  dailyWakeAcuHours: 0.5 * (6 / 60),
  /** API Gateway WebSocket API: connection minutes, and messages (either way, per 32 KB). */
  wsConnectionMinutePerMillion: 0.25,
  wsMessagePerMillion: 1.0,
  /** A WebSocket connection lasts at most 2 hours; one idle 10 minutes is closed. */
  wsMaxConnectionS: 2 * 3600,
  /** The runner's keepalive on the socket (API Gateway ignores protocol pings): a message every 9 min. */
  wsKeepaliveS: 9 * 60,
  /** With the channel up, the runner still claims this often: what a lost push costs at most. */
  pushedRunnerPollS: 300,
  /** $connect and $disconnect: a Lambda answered from the gate's bucket. */
  wsRouteMs: 30,
  /** Fargate, Linux on x86_64, billed by the second (a minute at least). */
  fargateVcpuHour: 0.04048,
  fargateGbHour: 0.004445,
  /** A launched runner's billed time besides its task: the image pull and start, the exit. */
  fargateOverheadS: 30,
  /** What a runner's task writes to CloudWatch Logs (its own lines; the scripts' go to Conductor). */
  runnerLogBytesPerTask: 20 * 1024,
  ecrGbMonth: 0.1,
  /** The runner image (node:20-bookworm-slim, git, the runner), compressed. */
  runnerImageGb: 0.2,
};

interface Template {
  Resources: Record<string, { Type: string; Properties?: Record<string, unknown> }>;
}

interface FunctionProps {
  Description?: string;
  MemorySize?: number;
  Environment?: { Variables?: Record<string, unknown> };
  LoggingConfig?: { LogFormat?: string; SystemLogLevel?: string };
}

export interface CostLine {
  item: string;
  monthly: number;
}

const of = (t: Template, type: string) => Object.values(t.Resources).filter((r) => r.Type === type);

/**
 * What the template costs a month with no CI traffic, line by line, with
 * `opts.runners` runners polling (none by default).
 */
export function idleCost(t: Template, p = PRICES, opts: { runners?: number } = {}): CostLine[] {
  const h = p.hoursPerMonth;
  const lines: CostLine[] = [];
  const add = (item: string, monthly: number) => monthly > 0 && lines.push({ item, monthly });
  const nats = of(t, 'AWS::EC2::NatGateway').length;
  add('NAT gateway (+ its IPv4 address)', nats * (p.natGatewayHour + p.publicIpv4Hour) * h);
  const natInstances = of(t, 'AWS::EC2::Instance').filter(
    (r) => r.Properties?.InstanceType === 't4g.nano',
  );
  add(
    'NAT instance t4g.nano (+ IPv4, 8 GB gp3)',
    natInstances.length *
      ((p.t4gNanoHour + p.publicIpv4Hour) * h + p.natInstanceRootGb * p.ebsGp3GbMonth),
  );
  const clusters = of(t, 'AWS::RDS::DBCluster');
  for (const c of clusters) {
    const scaling = c.Properties?.ServerlessV2ScalingConfiguration as {
      MinCapacity: number;
      MaxCapacity: number;
    };
    add(
      `Aurora at its minimum ${scaling.MinCapacity} ACU`,
      scaling.MinCapacity * p.auroraAcuHour * h,
    );
    add('Aurora storage (1 GB)', p.auroraStorageGb * p.auroraStorageGbMonth);
    if (scaling.MinCapacity === 0) {
      // The sweep that runs past the gate (infra/stack.ts): `rate(N days)`.
      const every = of(t, 'AWS::Events::Rule')
        .map((r) => /^rate\((\d+) days?\)$/.exec(String(r.Properties?.ScheduleExpression)))
        .find((m) => m !== null);
      const days = every ? Number(every[1]) : 1;
      add(
        `Aurora woken by the backstop sweep (every ${days} day${days === 1 ? '' : 's'})`,
        (30 / days) * p.dailyWakeAcuHours * p.auroraAcuHour,
      );
    }
    if (of(t, 'AWS::RDS::DBProxy').length > 0) {
      add(
        'RDS Proxy (8-ACU minimum)',
        Math.max(p.rdsProxyMinAcu, scaling.MaxCapacity) * p.rdsProxyAcuHour * h,
      );
    }
  }
  add('Secrets Manager secrets', of(t, 'AWS::SecretsManager::Secret').length * p.secretMonth);
  add('CloudWatch alarms', of(t, 'AWS::CloudWatch::Alarm').length * p.alarmMetricMonth);
  const esms = of(t, 'AWS::Lambda::EventSourceMapping').length;
  add(
    'SQS: the webhook consumer long-polling',
    (esms * p.sqsIdleReceivesMonth * p.sqsPerMillion) / 1e6,
  );
  // The minute's sweep behind a closed gate: an invocation, and three reads
  // (the marker, a close left pending, the wake time).
  const sweeps = 60 * h;
  add(
    'sweep every minute (closed gate: Lambda ~100 ms at 512 MB, three S3 reads)',
    (sweeps * p.lambdaPerMillion) / 1e6 +
      sweeps * 0.1 * 0.5 * p.lambdaArmGbSecond +
      (3 * sweeps * p.s3GetPerThousand) / 1000,
  );
  // Fargate runners (fargateRunners): the cluster, the task definition, the
  // roles and an empty bucket are free; no runner runs while nothing is queued.
  if (of(t, 'AWS::ECS::TaskDefinition').length > 0) {
    add(
      `Fargate runners' image in ECR (~${p.runnerImageGb} GB; no runner runs while idle)`,
      p.runnerImageGb * p.ecrGbMonth,
    );
  }
  lines.push(...runnersCost(t, opts.runners ?? 0, p));
  return lines;
}

/** The claim function of a template, if it has one. */
function claimFunction(t: Template): FunctionProps | undefined {
  return of(t, 'AWS::Lambda::Function')
    .map((r) => r.Properties as FunctionProps)
    .find((f) => f.Description?.includes('claim a task'));
}

/**
 * What `runners` idle runners add a month, polling every `runnerPollS`
 * behind a closed gate: each poll is an API request and an invocation
 * answered from the gate (no connection); each container reads the marker
 * and its runners' tokens once per gate cache period; the platform's log
 * lines unless the function logs JSON at WARN; and the database wakes that
 * container turnover causes, none when the tokens are in the gate's bucket
 * (a container that must hear the database accept a token wakes it).
 */
export function runnersCost(t: Template, runners: number, p = PRICES): CostLine[] {
  const claim = claimFunction(t);
  if (runners === 0 || !claim) return [];
  const seconds = p.hoursPerMonth * 3600;
  const polls = (runners * seconds) / p.runnerPollS;
  const env = claim.Environment?.Variables ?? {};
  const cacheS = Number(env.CONDUCTOR_GATE_CACHE_MS ?? 30_000) / 1000;
  const memoryGb = (claim.MemorySize ?? 512) / 1024;
  const quietLogs =
    claim.LoggingConfig?.LogFormat === 'JSON' && claim.LoggingConfig?.SystemLogLevel === 'WARN';
  // One container per runner at most (a poll takes milliseconds); each reads
  // the marker once per cache period and its token once per TOKEN_CACHE_MS.
  const s3Reads = runners * (seconds / cacheS + seconds / (TOKEN_CACHE_MS / 1000));
  const tokensInBucket = env.CONDUCTOR_GATE_BUCKET !== undefined;
  const wakes = tokensInBucket ? 0 : runners * p.containerTurnoversPerDay * 30;
  const who = `${runners} idle runner${runners === 1 ? '' : 's'}`;
  const lines: CostLine[] = [
    {
      item: `${who}: API requests (a poll every ${p.runnerPollS} s)`,
      monthly: (polls * p.httpApiPerMillion) / 1e6,
    },
    {
      item: `${who}: claim invocations (${p.closedClaimMs} ms at ${claim.MemorySize ?? 512} MB)`,
      monthly:
        (polls * p.lambdaPerMillion) / 1e6 +
        polls * (p.closedClaimMs / 1000) * memoryGb * p.lambdaArmGbSecond,
    },
    {
      item: `${who}: S3 reads (the marker every ${cacheS} s, its token every ${TOKEN_CACHE_MS / 60_000} min)`,
      monthly: (s3Reads * p.s3GetPerThousand) / 1000,
    },
    {
      item: `${who}: logs (${quietLogs ? 'none: JSON at WARN' : 'START, END, REPORT per poll'})`,
      monthly: quietLogs ? 0 : (polls * p.platformLogBytes * p.logsIngestGb) / 1024 ** 3,
    },
    {
      item: `${who}: database wakes from container turnover (${wakes ? `${wakes} a month` : 'none: tokens in the gate'})`,
      monthly: wakes * p.dailyWakeAcuHours * p.auroraAcuHour,
    },
  ];
  return lines;
}

/**
 * The push channel on AWS (#52), per idle runner (lib/app/channel.ts,
 * functions/channel.ts): an API Gateway WebSocket API the runner holds open.
 * An empty claim offers it with a ticket signed by the control plane (the
 * worker's scope and an expiry; made from the gate's copy of the token when
 * the gate is closed), `$connect` checks the ticket's signature and writes
 * the connection to a registry in the gate's bucket (`channel/<id>.json`),
 * `$disconnect` deletes it; neither opens a database connection, so an idle
 * runner never wakes Aurora. After a commit that makes tasks claimable the
 * function that made it lists the registry and posts a hint to each matching
 * connection (POST @connections); the runner then claims over HTTPS as it
 * does now. A long poll would instead hold a claim Lambda per idle runner
 * (512 MB around the clock: about $17.50 a month). The socket is reopened
 * every 2 hours (API Gateway's limit) and kept alive with a message every 9
 * minutes (its idle limit is 10, and it answers no protocol ping); while it
 * is up the runner claims every `pushedRunnerPollS` all the same, so a lost
 * hint costs at most that, and without it the runner polls as today.
 */
export function pushChannelCost(p = PRICES): CostLine[] {
  const seconds = p.hoursPerMonth * 3600;
  const connects = seconds / p.wsMaxConnectionS;
  const keepalives = seconds / p.wsKeepaliveS;
  const polls = seconds / p.pushedRunnerPollS;
  const lambda = (n: number, ms: number) =>
    (n * p.lambdaPerMillion) / 1e6 + n * (ms / 1000) * 0.5 * p.lambdaArmGbSecond;
  return [
    {
      item: 'the socket held open (connection minutes)',
      monthly: ((seconds / 60) * p.wsConnectionMinutePerMillion) / 1e6,
    },
    {
      item: `keepalive messages (one every ${p.wsKeepaliveS / 60} min)`,
      monthly: (keepalives * p.wsMessagePerMillion) / 1e6,
    },
    {
      item: `reconnects every ${p.wsMaxConnectionS / 3600} h: the claim that offers a ticket, $connect/$disconnect Lambdas, a registry write (its delete is free)`,
      monthly:
        (connects * p.httpApiPerMillion) / 1e6 +
        lambda(connects, p.closedClaimMs) +
        2 * lambda(connects, p.wsRouteMs) +
        (connects * p.s3PutPerThousand) / 1000,
    },
    {
      item: `a claim every ${p.pushedRunnerPollS / 60} min while the channel is up (request, closed-gate invocation, marker read)`,
      monthly:
        (polls * p.httpApiPerMillion) / 1e6 +
        lambda(polls, p.closedClaimMs) +
        (polls * p.s3GetPerThousand) / 1000,
    },
  ];
}

/**
 * What CI traffic adds a month at `tasksPerDay` (a task: a claim, ~10
 * heartbeats and log chunks, a completion; a job per 5 tasks): requests,
 * invocations, and Aurora awake at 0.5 ACU for the hours with work (at most
 * all of them), each wake lasting at least 10 minutes.
 */
export function trafficCost(tasksPerDay: number, p = PRICES): CostLine[] {
  const requests = tasksPerDay * 30 * 13;
  const invocations = requests + (tasksPerDay / 5) * 30 * 3;
  const awakeHours = Math.min(p.hoursPerMonth, Math.max(tasksPerDay / 50, 1) * 30 * (10 / 60));
  const acu = tasksPerDay > 20_000 ? 2 : 0.5;
  return [
    { item: 'HTTP API requests', monthly: (requests * p.httpApiPerMillion) / 1e6 },
    {
      item: 'Lambda (invocations, ~50 ms at 512 MB)',
      monthly:
        (invocations * p.lambdaPerMillion) / 1e6 + invocations * 0.05 * 0.5 * p.lambdaArmGbSecond,
    },
    {
      item: 'S3 gate reads and writes',
      monthly: ((tasksPerDay / 5) * 30 * 3 * p.s3PutPerThousand) / 1000,
    },
    {
      item: `Aurora awake (${acu} ACU, ${Math.round(awakeHours)} h)`,
      monthly: awakeHours * acu * p.auroraAcuHour,
    },
  ];
}

/** A Fargate runner's size: the template's task definition, or the default (infra/fleet.ts). */
export function fargateSize(t?: Template): { cpu: number; memoryMiB: number } {
  const td = t && of(t, 'AWS::ECS::TaskDefinition')[0];
  if (!td) return { ...RUNNER_TASK_SIZE };
  return { cpu: Number(td.Properties?.Cpu), memoryMiB: Number(td.Properties?.Memory) };
}

/** What a minute of one Fargate runner costs, at a size (vCPU units of 1024, MiB). */
export function fargateTaskMinute(size = fargateSize(), p = PRICES): number {
  return ((size.cpu / 1024) * p.fargateVcpuHour + (size.memoryMiB / 1024) * p.fargateGbHour) / 60;
}

/**
 * What launched Fargate runners cost a month at `tasksPerDay` tasks of
 * `minutes` each, one runner a task: its billed time (the task, plus the
 * image pull and start, a minute at least), its log lines, and the token
 * file written for it. Nothing runs, and nothing is billed, between tasks:
 * the image's storage is the whole of it while idle (`idleCost`).
 */
export function fargateCost(
  tasksPerDay: number,
  minutes: number,
  size = fargateSize(),
  p = PRICES,
): CostLine[] {
  const tasks = tasksPerDay * 30;
  const billedMin = Math.max(1, minutes + p.fargateOverheadS / 60);
  const vcpu = size.cpu / 1024;
  const gb = size.memoryMiB / 1024;
  return [
    {
      item: `Fargate runners (${vcpu} vCPU, ${gb} GB; ${billedMin} min billed a task)`,
      monthly: tasks * billedMin * fargateTaskMinute(size, p),
    },
    {
      item: "Fargate runners' own logs",
      monthly: (tasks * p.runnerLogBytesPerTask * p.logsIngestGb) / 1024 ** 3,
    },
    { item: 'token files (one PUT a launch)', monthly: (tasks * p.s3PutPerThousand) / 1000 },
  ];
}

export const total = (lines: CostLine[]) => lines.reduce((n, l) => n + l.monthly, 0);

if (process.argv[1]?.endsWith('cost.ts')) {
  const file = process.argv[2] ?? 'cdk.out/Conductor.template.json';
  const t = JSON.parse(readFileSync(file, 'utf8')) as Template;
  console.log(`prices of ${PRICES.date} (us-east-1), per month`);
  for (const runners of [0, 1, 3]) {
    const idle = idleCost(t, PRICES, { runners });
    console.log(`\nidle with ${runners} polling runner${runners === 1 ? '' : 's'}:`);
    for (const l of idle) console.log(`  ${l.item.padEnd(80)} $${l.monthly.toFixed(2)}`);
    console.log(`  total: $${total(idle).toFixed(2)}`);
  }
  const pushed = pushChannelCost();
  console.log('\nan idle runner on the push channel (#52):');
  for (const l of pushed) console.log(`  ${l.item.padEnd(80)} $${l.monthly.toFixed(4)}`);
  console.log(`  total: $${total(pushed).toFixed(3)}`);
  const idle = idleCost(t);
  for (const n of [1_000, 100_000]) {
    console.log(
      `at ${n.toLocaleString('en')} tasks a day: $${(total(idle) + total(trafficCost(n))).toFixed(2)}`,
    );
  }
  const size = fargateSize(t);
  console.log(
    `\nFargate runners at ${size.cpu / 1024} vCPU, ${size.memoryMiB / 1024} GB: $${fargateTaskMinute(size).toFixed(5)} a task-minute; idle runners $0`,
  );
  const fargate = fargateCost(1_000, 5, size);
  console.log('at 1,000 tasks a day of 5 minutes, each on a launched runner:');
  for (const l of fargate) console.log(`  ${l.item.padEnd(80)} $${l.monthly.toFixed(2)}`);
  console.log(`  total: $${total(fargate).toFixed(2)} (+ the traffic above)`);
}
