// The stack's settings as CDK context values: `-c name=value` on the command
// line (strings, JSON for the two objects) or a `context` block in a cdk.json
// (typed values). Parsed once; a bad value's error names the key, the value
// given and what the setting takes (VALID_VALUES).
import { Duration, aws_logs as logs } from 'aws-cdk-lib';
import * as z from '../lib/zod.ts';
import { SETTING_DEFAULTS } from './defaults.ts';
import type { ConductorStackProps } from './stack.ts';

const bool = z.union([z.boolean(), z.stringbool()]);
const num = (schema: z.ZodMiniNumber<number>) =>
  z.union([schema, z.pipe(z.pipe(z.string(), z.transform(Number)), schema)]);
const json = <T extends z.core.$ZodType>(schema: T) =>
  z.union([
    schema,
    z.pipe(
      z.pipe(
        z.string(),
        z.transform((text: string, ctx) => {
          try {
            return JSON.parse(text) as unknown;
          } catch {
            // zod/mini's transform has no ctx.addIssue: this is the issue classic's added.
            ctx.issues.push({ code: 'custom', message: 'must be JSON', input: text });
            return z.NEVER;
          }
        }),
      ),
      schema,
    ),
  ]);
const ids = z.array(z.string().check(z.minLength(1))).check(z.minLength(1));
const RETENTION_DAYS = Object.values(logs.RetentionDays).filter(
  (v): v is logs.RetentionDays => typeof v === 'number',
);

export const ContextSchema = z.object({
  stackName: z._default(z.string().check(z.regex(/^[A-Za-z][A-Za-z0-9-]*$/)), 'Conductor'),
  sweepIntervalMinutes: z.optional(num(z.number().check(z.int(), z.gte(1), z.lte(1440)))),
  minCapacity: z.optional(num(z.number().check(z.gte(0), z.lte(256), z.multipleOf(0.5)))),
  maxCapacity: z.optional(num(z.number().check(z.gte(1), z.lte(256), z.multipleOf(0.5)))),
  autoPauseMinutes: z.optional(num(z.number().check(z.int(), z.gte(5), z.lte(1440)))),
  postgresVersion: z.optional(
    z
      .string()
      .check(z.regex(/^1[56]\.\d+$/, 'must be an Aurora PostgreSQL 15 or 16 version, e.g. 16.11')),
  ),
  proxy: z.optional(bool),
  deletionProtection: z.optional(bool),
  nat: z.optional(z.enum(['gateway', 'instance'])),
  githubApiUrl: z.optional(z.url()),
  leaseSeconds: z.optional(num(z.number().check(z.int(), z.gte(1), z.lte(3600)))),
  dbPoolMax: z.optional(num(z.number().check(z.int(), z.gte(1), z.lte(20)))),
  logRetentionDays: z.optional(
    num(z.number().check(z.int())).check(
      z.refine(
        (d: number) => RETENTION_DAYS.includes(d),
        `must be one of ${RETENTION_DAYS.join(', ')}`,
      ),
    ),
  ),
  alarmEmail: z.optional(z.email()),
  reservedConcurrency: z.optional(bool),
  outsideVpc: z.optional(bool),
  throttleRate: z.optional(num(z.number().check(z.int(), z.gte(1), z.lte(10_000)))),
  throttleBurst: z.optional(num(z.number().check(z.int(), z.gte(1), z.lte(5_000)))),
  // Commit statuses link to <publicUrl>/jobs/<id>?sig=...: https only (the
  // link carries the signature), a path allowed (a proxy may mount the API
  // under one), no query or fragment (the link would break).
  publicUrl: z.optional(
    z
      .url({ protocol: /^https$/, hostname: z.regexes.domain, message: 'must be an https:// URL' })
      .check(z.refine((u: string) => !/[?#]/.test(u), 'must have no query or fragment')),
  ),
  fargateRunners: z.optional(bool),
  githubApp: z.optional(bool),
  pushChannel: z.optional(bool),
  runnerImage: z.optional(
    z
      .string()
      .check(
        z.regex(
          /^[a-z0-9][\w.:/@-]{0,499}$/,
          'must be an image reference, e.g. ghcr.io/acme/runner:1',
        ),
      ),
  ),
  existingVpc: z.optional(
    json(
      z.strictObject({
        vpcId: z.string().check(z.regex(/^vpc-[0-9a-f]+$/)),
        availabilityZones: ids,
        privateSubnetIds: ids,
        isolatedSubnetIds: z.optional(ids),
      }),
    ),
  ),
  existingDatabase: z.optional(
    json(
      z.strictObject({
        secretArn: z
          .string()
          .check(
            z.regex(
              /^arn:[\w-]+:secretsmanager:[\w-]+:\d{12}:secret:.+-[A-Za-z0-9]{6}$/,
              'must be the complete secret ARN (with its six-character suffix)',
            ),
          ),
        host: z.string().check(z.minLength(1)),
        dbName: z.optional(z.string().check(z.minLength(1))),
        securityGroupId: z.optional(z.string().check(z.regex(/^sg-[0-9a-f]+$/))),
        port: z.optional(z.number().check(z.int(), z.gte(1), z.lte(65535))),
      }),
    ),
  ),
});
export type Context = z.infer<typeof ContextSchema>;

/**
 * What each setting takes, as a bad value's message says it: every key of
 * ContextSchema must have a line (the type says so), so a new setting cannot
 * be refused without saying what it wants.
 */
export const VALID_VALUES: Readonly<Record<keyof Context, string>> = {
  stackName: 'a letter, then letters, digits and -',
  sweepIntervalMinutes: 'a whole number of minutes from 1 to 1440',
  minCapacity: 'ACUs from 0 to 256 in steps of 0.5 (0 lets Aurora pause)',
  maxCapacity: 'ACUs from 1 to 256 in steps of 0.5',
  autoPauseMinutes: 'a whole number of minutes from 5 to 1440',
  postgresVersion: 'an Aurora PostgreSQL 15 or 16 version, e.g. 16.11',
  proxy: 'true or false',
  deletionProtection: 'true or false',
  nat: 'gateway or instance',
  githubApiUrl: 'a URL, e.g. https://github.example.com/api/v3',
  leaseSeconds: 'a whole number of seconds from 1 to 3600',
  dbPoolMax: 'a whole number from 1 to 20',
  logRetentionDays: `one of ${RETENTION_DAYS.join(', ')}`,
  alarmEmail: 'an email address',
  reservedConcurrency: 'true or false',
  outsideVpc: 'true or false',
  throttleRate: 'requests per second, a whole number from 1 to 10000',
  throttleBurst: 'a whole number from 1 to 5000',
  publicUrl: 'an https:// URL without query or fragment, e.g. https://ci.example.com',
  fargateRunners: 'true or false',
  githubApp: 'true or false',
  pushChannel: 'true or false',
  runnerImage: 'an image reference, e.g. 123456789012.dkr.ecr.eu-west-1.amazonaws.com/runner:1',
  existingVpc:
    'JSON: {"vpcId": "vpc-...", "availabilityZones": [...], "privateSubnetIds": [...], "isolatedSubnetIds"?: [...]}',
  existingDatabase:
    'JSON: {"secretArn": "<the complete secret ARN>", "host": "...", "dbName"?: "...", "securityGroupId"?: "sg-...", "port"?: 5432}',
};

/**
 * A deploy setting that cannot be used. Its message is the whole story (the
 * setting, the value given, what it takes), so infra/app.ts prints it alone,
 * without a stack trace.
 */
export class ContextError extends Error {
  override name = 'ContextError';
}

// A value as the message quotes it: as typed, or a cdk.json value as JSON; cut short.
function shown(value: unknown): string {
  const text = typeof value === 'string' ? value : JSON.stringify(value);
  return text.length > 80 ? `${text.slice(0, 80)}…` : text;
}

/** Reads the stack's settings from context values; throws naming every bad key. */
export function propsFromContext(get: (key: string) => unknown): {
  stackName: string;
  props: ConductorStackProps;
} {
  const raw = Object.fromEntries(
    Object.keys(ContextSchema.shape)
      .map((key) => [key, get(key)])
      .filter(([, value]) => value !== undefined && value !== ''),
  );
  const parsed = ContextSchema.safeParse(raw);
  if (!parsed.success) {
    // One line per setting: the value given and what the setting takes, and
    // the problem itself when it says more than that (a field inside a JSON
    // value, a message of our own); zod's generic words ("Invalid input") not.
    const lines = new Map<string, string>();
    for (const issue of parsed.error.issues) {
      const key = String(issue.path[0] ?? '') as keyof Context;
      if (lines.has(key)) continue;
      const takes = VALID_VALUES[key] ?? 'what docs/deploy.md says';
      const detail =
        issue.path.length > 1
          ? `${issue.path.join('.')}: ${issue.message}`
          : /^must /.test(issue.message) && !takes.includes(issue.message.replace(/^must be /, ''))
            ? issue.message
            : '';
      lines.set(
        key,
        `  -c ${key}=${shown(raw[key])}: ${key} takes ${takes}${detail ? ` (${detail})` : ''}`,
      );
    }
    const n = lines.size;
    throw new ContextError(
      `bad deploy setting${n === 1 ? '' : 's'} (docs/deploy.md lists them all):\n${[...lines.values()].join('\n')}`,
    );
  }
  const c = parsed.data;
  return {
    stackName: c.stackName,
    props: {
      sweepInterval: c.sweepIntervalMinutes ? Duration.minutes(c.sweepIntervalMinutes) : undefined,
      minCapacity: c.minCapacity,
      maxCapacity: c.maxCapacity,
      autoPauseAfter: c.autoPauseMinutes ? Duration.minutes(c.autoPauseMinutes) : undefined,
      postgresVersion: c.postgresVersion,
      proxy: c.proxy,
      deletionProtection: c.deletionProtection,
      nat: c.nat,
      githubApiUrl: c.githubApiUrl,
      leaseSeconds: c.leaseSeconds,
      dbPoolMax: c.dbPoolMax,
      logRetentionDays: c.logRetentionDays,
      alarmEmail: c.alarmEmail,
      reservedConcurrency: c.reservedConcurrency,
      throttle:
        c.throttleRate || c.throttleBurst
          ? {
              rate: c.throttleRate ?? SETTING_DEFAULTS.throttleRate,
              burst: c.throttleBurst ?? SETTING_DEFAULTS.throttleBurst,
            }
          : undefined,
      existingVpc: c.existingVpc,
      existingDatabase: c.existingDatabase,
      outsideVpc: c.outsideVpc,
      publicUrl: c.publicUrl,
      fargateRunners: c.fargateRunners,
      githubApp: c.githubApp,
      pushChannel: c.pushChannel,
      runnerImage: c.runnerImage,
    },
  };
}

/** `-c key=value` / `--context key=value` pairs from a command line (the CDK CLI's syntax). */
export function contextFromArgs(args: readonly string[]): Record<string, string> {
  const context: Record<string, string> = {};
  for (let i = 0; i < args.length; i++) {
    if (args[i] !== '-c' && args[i] !== '--context') continue;
    const pair = args[++i] ?? '';
    const eq = pair.indexOf('=');
    if (eq <= 0) throw new ContextError(`-c takes a setting as key=value, got "${pair}"`);
    context[pair.slice(0, eq)] = pair.slice(eq + 1);
  }
  return context;
}
