// The `ecs` provider: a Fargate task per runner (RunTask), the image built
// from Dockerfile.runner (infra/fleet.ts). The worker token never goes in
// the task's overrides (whoever may call DescribeTasks reads those): it is
// written to an S3 object, and the override names that object as the
// container's environment file, which ECS reads with the task's execution
// role and hands the runner as $CONDUCTOR_RUNNER_TOKEN (blanked by the
// runner before any script starts). The object is deleted once ECS has read
// it (the task seen past PENDING by the reconcile, or stopped), or at once
// when RunTask starts nothing.
import {
  DescribeTasksCommand,
  ECSClient,
  RunTaskCommand,
  type RunTaskCommandOutput,
  StopTaskCommand,
  type StopTaskCommandOutput,
  type Task,
} from '@aws-sdk/client-ecs';
import { DeleteObjectCommand, PutObjectCommand, S3Client } from '@aws-sdk/client-s3';
import { type EcsSettings, EcsSettingsSchema } from './ecs-settings.ts';
import type { PoolRow } from './pools.ts';
import { LaunchError, type LaunchSpec, type RunnerProvider } from './provider.ts';

// The settings live apart (ecs-settings.ts): a function validates a pool's
// settings without loading this module and the SDK it imports.
export { type EcsSettings, EcsSettingsSchema } from './ecs-settings.ts';

export const ECS_IDLE_LIMIT_S = 60;

/** The S3 key of a launch try's token file. */
export function tokenKey(prefix: string, spec: Pick<LaunchSpec, 'launchId' | 'attempt'>): string {
  return `${prefix}${spec.launchId}-${spec.attempt}.env`;
}

// Errors that a later try may not meet (AWS's throttling and capacity names).
const RETRYABLE = new Set([
  'ThrottlingException',
  'ServerException',
  'LimitExceededException',
  'ServiceUnavailableException',
]);

// A task in these states has started its container (its environment file is
// read) or never will: its token file has served its purpose.
const PAST_PENDING = new Set([
  'RUNNING',
  'DEACTIVATING',
  'STOPPING',
  'DEPROVISIONING',
  'STOPPED',
  'DELETED',
]);

export class EcsProvider implements RunnerProvider {
  readonly settings = EcsSettingsSchema;
  private readonly clients = new Map<string, { ecs: ECSClient; s3: S3Client }>();

  constructor(
    private readonly opts: { endpoint?: string; s3Endpoint?: string; tokenPrefix: string } = {
      tokenPrefix: 'runner-tokens/',
    },
  ) {}

  private client(region: string | undefined) {
    const key = region ?? '';
    let c = this.clients.get(key);
    if (!c) {
      c = {
        // The SDK's own retries are off: a throttled launch backs off as a
        // row (its error the task's waiting reason), not inside a request.
        ecs: new ECSClient({
          ...(region ? { region } : {}),
          ...(this.opts.endpoint ? { endpoint: this.opts.endpoint } : {}),
          maxAttempts: 1,
        }),
        s3: new S3Client({
          ...(region ? { region } : {}),
          ...(this.opts.s3Endpoint ? { endpoint: this.opts.s3Endpoint, forcePathStyle: true } : {}),
        }),
      };
      this.clients.set(key, c);
    }
    return c;
  }

  async launch(spec: LaunchSpec): Promise<string> {
    const s = EcsSettingsSchema.parse(spec.pool.settings);
    const { ecs, s3 } = this.client(s.region);
    const key = tokenKey(this.opts.tokenPrefix, spec);
    try {
      await s3.send(
        new PutObjectCommand({
          Bucket: s.token_bucket,
          Key: key,
          Body: `CONDUCTOR_RUNNER_TOKEN=${spec.token}\n`,
          ContentType: 'text/plain',
        }),
      );
    } catch (err) {
      throw new LaunchError(`could not write the runner's token file: ${describe(err)}`, true, {
        cause: err,
      });
    }
    const command = [
      '--url',
      spec.url,
      '--once',
      '--idle-limit-s',
      String(s.idle_limit_s ?? ECS_IDLE_LIMIT_S),
      '--executor',
      s.executor ?? 'shell',
      ...(spec.pool.trust === 'untrusted' ? ['--untrusted'] : []),
    ];
    let out: RunTaskCommandOutput;
    try {
      out = await ecs.send(
        new RunTaskCommand({
          cluster: s.cluster,
          taskDefinition: s.task_definition,
          launchType: 'FARGATE',
          count: 1,
          // The same try of the same launch, repeated, starts one task.
          clientToken: `${spec.launchId}-${spec.attempt}`.slice(0, 64),
          startedBy: `conductor-${spec.pool.name}`.slice(0, 36),
          networkConfiguration: {
            awsvpcConfiguration: {
              subnets: s.subnets,
              securityGroups: s.security_groups,
              assignPublicIp: s.assign_public_ip ? 'ENABLED' : 'DISABLED',
            },
          },
          overrides: {
            containerOverrides: [
              {
                name: s.container,
                command,
                environmentFiles: [{ type: 's3', value: `arn:aws:s3:::${s.token_bucket}/${key}` }],
              },
            ],
          },
          tags: [
            { key: 'conductor:pool', value: spec.pool.name },
            { key: 'conductor:launch', value: spec.launchId },
          ],
        }),
      );
    } catch (err) {
      await this.dropToken(s, key);
      const name = (err as { name?: string }).name ?? '';
      throw new LaunchError(`RunTask failed: ${describe(err)}`, RETRYABLE.has(name), {
        cause: err,
      });
    }
    const arn = out.tasks?.[0]?.taskArn;
    if (!arn) {
      await this.dropToken(s, key);
      const f = out.failures?.[0];
      throw new LaunchError(
        `RunTask started no task: ${f ? `${f.reason ?? 'unknown'}${f.detail ? ` (${f.detail})` : ''}` : 'no failure given'}`,
        true,
      );
    }
    return arn;
  }

  private async dropToken(s: EcsSettings, key: string): Promise<void> {
    await this.client(s.region)
      .s3.send(new DeleteObjectCommand({ Bucket: s.token_bucket, Key: key }))
      .catch(() => {});
  }

  async running(pool: PoolRow, refs: string[]): Promise<Set<string> | undefined> {
    const s = EcsSettingsSchema.parse(pool.settings);
    const alive = new Set<string>();
    for (let i = 0; i < refs.length; i += 100) {
      const out = await this.client(s.region).ecs.send(
        new DescribeTasksCommand({ cluster: s.cluster, tasks: refs.slice(i, i + 100) }),
      );
      // A task ECS no longer knows (stopped long ago) comes back in
      // failures[] as MISSING: not alive either.
      for (const t of out.tasks ?? []) {
        if (t.taskArn && t.lastStatus !== 'STOPPED') alive.add(t.taskArn);
        if (PAST_PENDING.has(t.lastStatus ?? '')) await this.dropTokensOf(s, t);
      }
    }
    return alive;
  }

  async stop(pool: PoolRow, ref: string): Promise<void> {
    const s = EcsSettingsSchema.parse(pool.settings);
    let out: StopTaskCommandOutput;
    try {
      out = await this.client(s.region).ecs.send(
        new StopTaskCommand({ cluster: s.cluster, task: ref, reason: 'conductor: launch ended' }),
      );
    } catch (err) {
      // A task ECS no longer knows (stopped long ago) is gone already.
      const e = err as { name?: string; message?: string };
      if (e.name === 'InvalidParameterException' && /not found/i.test(e.message ?? '')) return;
      throw err;
    }
    await this.dropTokensOf(s, out.task);
  }

  /** Deletes the token files a task's overrides name (only this provider's, in the pool's bucket). */
  private async dropTokensOf(s: EcsSettings, task: Task | undefined): Promise<void> {
    const arn = `arn:aws:s3:::${s.token_bucket}/${this.opts.tokenPrefix}`;
    for (const o of task?.overrides?.containerOverrides ?? []) {
      for (const f of o.environmentFiles ?? []) {
        if (f.value?.startsWith(arn)) {
          await this.dropToken(s, f.value.slice(`arn:aws:s3:::${s.token_bucket}/`.length));
        }
      }
    }
  }
}

function describe(err: unknown): string {
  const e = err as { name?: string; message?: string };
  return e.name && e.message ? `${e.name}: ${e.message}` : String(err);
}
