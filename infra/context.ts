// The stack's settings as CDK context values: `-c name=value` on the command
// line (strings, JSON for the two objects) or a `context` block in a cdk.json
// (typed values). Parsed once; a bad value's error names the key.
import { Duration, aws_logs as logs } from 'aws-cdk-lib';
import { z } from 'zod';
import { SETTING_DEFAULTS } from './defaults.ts';
import type { ConductorStackProps } from './stack.ts';

const bool = z.union([z.boolean(), z.stringbool()]);
const num = (schema: z.ZodNumber) => z.union([schema, z.string().transform(Number).pipe(schema)]);
const json = <T extends z.ZodType>(schema: T) =>
  z.union([
    schema,
    z
      .string()
      .transform((text, ctx) => {
        try {
          return JSON.parse(text) as unknown;
        } catch {
          ctx.addIssue({ code: 'custom', message: 'must be JSON' });
          return z.NEVER;
        }
      })
      .pipe(schema),
  ]);
const ids = z.array(z.string().min(1)).min(1);
const RETENTION_DAYS = Object.values(logs.RetentionDays).filter(
  (v): v is logs.RetentionDays => typeof v === 'number',
);

export const ContextSchema = z.object({
  stackName: z
    .string()
    .regex(/^[A-Za-z][A-Za-z0-9-]*$/)
    .default('Conductor'),
  sweepIntervalMinutes: num(z.number().int().min(1).max(1440)).optional(),
  minCapacity: num(z.number().min(0).max(256).multipleOf(0.5)).optional(),
  maxCapacity: num(z.number().min(1).max(256).multipleOf(0.5)).optional(),
  autoPauseMinutes: num(z.number().int().min(5).max(1440)).optional(),
  postgresVersion: z
    .string()
    .regex(/^1[56]\.\d+$/, 'must be an Aurora PostgreSQL 15 or 16 version, e.g. 16.11')
    .optional(),
  proxy: bool.optional(),
  deletionProtection: bool.optional(),
  nat: z.enum(['gateway', 'instance']).optional(),
  githubApiUrl: z.url().optional(),
  leaseSeconds: num(z.number().int().min(1).max(3600)).optional(),
  dbPoolMax: num(z.number().int().min(1).max(20)).optional(),
  logRetentionDays: num(z.number().int())
    .refine((d) => RETENTION_DAYS.includes(d), `must be one of ${RETENTION_DAYS.join(', ')}`)
    .optional(),
  alarmEmail: z.email().optional(),
  reservedConcurrency: bool.optional(),
  outsideVpc: bool.optional(),
  throttleRate: num(z.number().int().min(1).max(10_000)).optional(),
  throttleBurst: num(z.number().int().min(1).max(5_000)).optional(),
  // Commit statuses link to <publicUrl>/jobs/<id>?sig=...: https only (the
  // link carries the signature), a path allowed (a proxy may mount the API
  // under one), no query or fragment (the link would break).
  publicUrl: z
    .url({ protocol: /^https$/, hostname: z.regexes.domain, message: 'must be an https:// URL' })
    .refine((u) => !/[?#]/.test(u), 'must have no query or fragment')
    .optional(),
  existingVpc: json(
    z.strictObject({
      vpcId: z.string().regex(/^vpc-[0-9a-f]+$/),
      availabilityZones: ids,
      privateSubnetIds: ids,
      isolatedSubnetIds: ids.optional(),
    }),
  ).optional(),
  existingDatabase: json(
    z.strictObject({
      secretArn: z
        .string()
        .regex(
          /^arn:[\w-]+:secretsmanager:[\w-]+:\d{12}:secret:.+-[A-Za-z0-9]{6}$/,
          'must be the complete secret ARN (with its six-character suffix)',
        ),
      host: z.string().min(1),
      dbName: z.string().min(1).optional(),
      securityGroupId: z
        .string()
        .regex(/^sg-[0-9a-f]+$/)
        .optional(),
      port: z.number().int().min(1).max(65535).optional(),
    }),
  ).optional(),
});
export type Context = z.infer<typeof ContextSchema>;

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
    throw new Error(
      `bad context: ${parsed.error.issues.map((i) => `${i.path.join('.')}: ${i.message}`).join('; ')}`,
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
    if (eq <= 0) throw new Error(`context must be key=value, got "${pair}"`);
    context[pair.slice(0, eq)] = pair.slice(eq + 1);
  }
  return context;
}
