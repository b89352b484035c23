import { isIP } from 'node:net';
import * as z from './zod.ts';

// The environment, validated once at cold start. Every variable is listed in
// the README's configuration table; a bad value fails fast naming the variable.

const positiveInt = (max: number) => z.coerce.number().check(z.int(), z.gte(1), z.lte(max));

/** Whether `s` is an IP address or a CIDR range (`10.0.0.0/8`, `fd00::/8`). */
function isAddressOrRange(s: string): boolean {
  const [address = '', bits, extra] = s.split('/');
  const family = isIP(address);
  if (family === 0 || extra !== undefined) return false;
  if (bits === undefined) return true;
  if (!/^\d{1,3}$/.test(bits)) return false;
  return Number(bits) <= (family === 4 ? 32 : 128);
}

export const ConfigSchema = z.object({
  /** Unset: the embedded PostgreSQL under CONDUCTOR_DATA_DIR (local only). */
  DATABASE_URL: z.optional(
    z.string().check(z.regex(/^postgres(ql)?:\/\//, 'must be a postgres:// or postgresql:// URL')),
  ),
  // 0 picks a free port (tests).
  PORT: z._default(z.coerce.number().check(z.int(), z.gte(0), z.lte(65535)), 8080),
  /** The address the local server binds (`0.0.0.0` or `::` for every interface). */
  CONDUCTOR_HOST: z._default(z.string().check(z.minLength(1), z.maxLength(255)), '127.0.0.1'),
  /**
   * The peers whose X-Forwarded-For/-Proto/-Host the local server believes:
   * addresses or CIDR ranges, comma-separated (local/forwarded.ts).
   */
  CONDUCTOR_TRUSTED_PROXIES: z.optional(
    z
      .pipe(
        z.string(),
        z.transform((v: string) =>
          v
            .split(',')
            .map((s) => s.trim())
            .filter(Boolean),
        ),
      )
      .check(
        z.superRefine((list, ctx) => {
          const bad = list.find((s) => !isAddressOrRange(s));
          if (bad !== undefined) {
            ctx.addIssue({
              code: 'custom',
              message: `"${bad}" is not an IP address or a CIDR range (10.0.0.0/8); list them comma-separated`,
            });
          }
        }),
      ),
  ),
  /** Unset locally: generated on first start and kept in the data directory. */
  CONDUCTOR_ADMIN_TOKEN: z.optional(
    z.string().check(z.minLength(16, 'must be at least 16 characters')),
  ),
  CONDUCTOR_DATA_DIR: z._default(z.string().check(z.minLength(1)), '.conductor'),
  /** One or more keys (comma-separated, the first seals); unset locally: generated and kept. */
  CONDUCTOR_SECRET_KEY: z.optional(z.string().check(z.minLength(1))),
  CONDUCTOR_GITHUB_API_URL: z._default(z.string().check(z.url()), 'https://api.github.com'),
  /** Sign-in with GitHub (docs/deploy.md, "Sign-in"): the OAuth app's client id; unset, not offered. */
  CONDUCTOR_GITHUB_CLIENT_ID: z.optional(z.string().check(z.minLength(1))),
  /** Locally; deployed, `github_client_secret` in the app secret. */
  CONDUCTOR_GITHUB_CLIENT_SECRET: z.optional(z.string().check(z.minLength(1))),
  /** Where GitHub's /login/oauth/authorize and /login/oauth/access_token are (GitHub Enterprise: its URL). */
  CONDUCTOR_GITHUB_OAUTH_URL: z.optional(z.string().check(z.url())),
  /** Sign-in with Gitea or Forgejo: the instance's base URL, and its OAuth2 application's client id. */
  CONDUCTOR_GITEA_URL: z.optional(z.string().check(z.url())),
  CONDUCTOR_GITEA_CLIENT_ID: z.optional(z.string().check(z.minLength(1))),
  /** Locally; deployed, `gitea_client_secret` in the app secret. */
  CONDUCTOR_GITEA_CLIENT_SECRET: z.optional(z.string().check(z.minLength(1))),
  /** Sign-in with GitLab: the instance's base URL (default https://gitlab.com), and its OAuth application's id. */
  CONDUCTOR_GITLAB_URL: z.optional(z.string().check(z.url())),
  CONDUCTOR_GITLAB_CLIENT_ID: z.optional(z.string().check(z.minLength(1))),
  /** Locally; deployed, `gitlab_client_secret` in the app secret. */
  CONDUCTOR_GITLAB_CLIENT_SECRET: z.optional(z.string().check(z.minLength(1))),
  /**
   * Adding a project from the page (docs/pages.md, "Adding a project"): a token of each forge
   * that lists the repositories it administers, makes their webhooks, and becomes the new
   * project's forge token. Unset: that forge's repositories are not offered.
   */
  CONDUCTOR_GITHUB_TOKEN: z.optional(z.string().check(z.minLength(1), z.maxLength(10_000))),
  CONDUCTOR_GITEA_TOKEN: z.optional(z.string().check(z.minLength(1), z.maxLength(10_000))),
  CONDUCTOR_GITLAB_TOKEN: z.optional(z.string().check(z.minLength(1), z.maxLength(10_000))),
  /**
   * The GitHub App (docs/deploy.md, "The GitHub App"): its id, the path of its
   * private key (PEM, as GitHub generates it), and its webhook secret. Unset:
   * no app; projects use their own webhook and token.
   */
  CONDUCTOR_GITHUB_APP_ID: z.optional(
    z.string().check(z.regex(/^\d{1,20}$/, "must be the app's numeric id")),
  ),
  CONDUCTOR_GITHUB_APP_PRIVATE_KEY_FILE: z.optional(
    z.string().check(z.minLength(1), z.maxLength(4096)),
  ),
  CONDUCTOR_GITHUB_APP_WEBHOOK_SECRET: z.optional(
    z.string().check(z.minLength(1), z.maxLength(1000)),
  ),
  /**
   * Deployed: a Secrets Manager secret {"app_id", "private_key", "webhook_secret"} the
   * three settings above are read from at cold start (the key written to a file of its own).
   */
  CONDUCTOR_GITHUB_APP_SECRET_ARN: z.optional(z.string().check(z.minLength(1))),
  /** How long a sign-in or a permission question waits for the forge before "try again". */
  CONDUCTOR_SIGNIN_TIMEOUT_MS: z._default(positiveInt(60_000), 5_000),
  CONDUCTOR_LEASE_S: z._default(positiveInt(3600), 45),
  CONDUCTOR_SWEEP_INTERVAL_S: z._default(positiveInt(3600), 10),
  /** The compile Lambda's name; unset means compile runs in-process. */
  CONDUCTOR_COMPILE_FUNCTION: z.optional(z.string().check(z.minLength(1))),
  CONDUCTOR_DB_POOL_MAX: z._default(positiveInt(1000), 10),
  /**
   * Send the hot statements as named prepared statements (parsed and planned
   * once per connection). Off behind RDS Proxy, which pins a session that
   * prepares; the deployment sets it from the proxy setting.
   */
  CONDUCTOR_DB_PREPARED_STATEMENTS: z.pipe(
    z._default(z.enum(['true', 'false'], { message: 'must be true or false' }), 'true'),
    z.transform((v: 'true' | 'false') => v === 'true'),
  ),
  /** Deployed: the database secret (username, password, host, port, dbname) in Secrets Manager. */
  CONDUCTOR_DB_SECRET_ARN: z.optional(z.string().check(z.minLength(1))),
  /** Deployed: the host to connect to (RDS Proxy's endpoint), overriding the secret's. */
  CONDUCTOR_DB_HOST: z.optional(z.string().check(z.minLength(1))),
  CONDUCTOR_DB_NAME: z.optional(z.string().check(z.minLength(1))),
  CONDUCTOR_DB_PORT: z._default(z.coerce.number().check(z.int(), z.gte(1), z.lte(65535)), 5432),
  /** Deployed: sign in as this role with an IAM token (RDS IAM authentication), not a password. */
  CONDUCTOR_DB_IAM_USER: z.optional(z.string().check(z.minLength(1))),
  /** Deployed: how the connection checks the server's certificate. */
  CONDUCTOR_DB_TLS: z._default(z.enum(['verify-full', 'no-verify']), 'no-verify'),
  /** Deployed: a Secrets Manager secret holding {"admin_token"} (and, before #17, "secret_key"). */
  CONDUCTOR_APP_SECRET_ARN: z.optional(z.string().check(z.minLength(1))),
  /** Deployed: a Secrets Manager secret whose value is the sealing key itself. */
  CONDUCTOR_SECRET_KEY_ARN: z.optional(z.string().check(z.minLength(1))),
  /** How long a connect may wait (a paused Aurora takes 15 to 30 s to resume). */
  CONDUCTOR_DB_CONNECT_TIMEOUT_MS: z._default(positiveInt(300_000), 20_000),
  /** Deployed: the S3 bucket of the idle gate's marker (and of queued webhook deliveries). */
  CONDUCTOR_GATE_BUCKET: z.optional(z.string().check(z.minLength(1))),
  /** How long a claim container trusts what it last read of the gate. */
  CONDUCTOR_GATE_CACHE_MS: z._default(positiveInt(600_000), 30_000),
  /** Deployed: the function a webhook delivery is handed to (an async invocation) when the database does not answer in time. */
  CONDUCTOR_WEBHOOK_CONSUMER: z.optional(z.string().check(z.minLength(1))),
  /** With the queue: how long a webhook waits for a database connection before queueing. */
  CONDUCTOR_WEBHOOK_DB_WAIT_MS: z._default(positiveInt(20_000), 4_000),
  CONDUCTOR_LOG_MAX_BYTES: z._default(positiveInt(2 ** 40), 64 * 1024 * 1024),
  /** The most all attempts of all tasks of one job may log (docs/limits.md); at least 1 MiB. */
  CONDUCTOR_JOB_LOG_MAX_BYTES: z._default(
    z.coerce
      .number()
      .check(z.int(), z.gte(1024 * 1024, 'must be at least 1048576 (1 MiB)'), z.lte(2 ** 50)),
    256 * 1024 * 1024,
  ),
  /**
   * `1`: the control plane may call forges on loopback, private and link-local
   * addresses (the tests' fake forges, a Gitea on this machine). Off, such a
   * forge is refused after its name is resolved (lib/forge/client.ts).
   */
  CONDUCTOR_ALLOW_PRIVATE_FORGES: z.pipe(
    z._default(z.enum(['0', '1'], { message: 'must be 0 or 1' }), '0'),
    z.transform((v: '0' | '1') => v === '1'),
  ),
  /**
   * The public base URL of this Conductor: every link (commit statuses'
   * <url>/jobs/<id>, badges), the OAuth callbacks, and whether cookies are Secure.
   */
  CONDUCTOR_PUBLIC_URL: z.optional(
    z.string().check(z.url(), z.regex(/^https?:\/\//i, 'must be an http:// or https:// URL')),
  ),
  /** A commit status still undelivered this long after it was written is given up. */
  CONDUCTOR_STATUS_GIVE_UP_H: z._default(positiveInt(24 * 30), 24),
  CONDUCTOR_RETENTION_LOG_DAYS: z._default(positiveInt(36500), 30),
  CONDUCTOR_RETENTION_JOB_DAYS: z._default(positiveInt(36500), 180),
  // Artifacts and caches (docs/artifacts.md). Unset bucket: a directory under
  // CONDUCTOR_DATA_DIR, served by the local server.
  /** The S3 bucket artifacts and caches are stored in (deployed). */
  CONDUCTOR_ARTIFACTS_BUCKET: z.optional(z.string().check(z.minLength(1))),
  /** The largest file an artifact or a cache entry may hold. */
  CONDUCTOR_ARTIFACT_FILE_MAX_BYTES: z._default(positiveInt(2 ** 50), 10 * 1024 ** 3),
  /** The most one task attempt may upload as artifacts. */
  CONDUCTOR_ARTIFACT_TASK_MAX_BYTES: z._default(positiveInt(2 ** 50), 20 * 1024 ** 3),
  /** The most one project may keep in unexpired artifacts. */
  CONDUCTOR_ARTIFACT_PROJECT_MAX_BYTES: z._default(positiveInt(2 ** 50), 200 * 1024 ** 3),
  /** A project's cache quota: past it, entries unused for 7 days go first, then the least recently used. */
  CONDUCTOR_CACHE_QUOTA_BYTES: z._default(positiveInt(2 ** 50), 10 * 1024 ** 3),
  // Notifications (docs/api.md, "Notifications").
  /** The SMTP server email notifications go through: smtp:// or smtps://user:pass@host:port. Unset: email notifications are given up. */
  CONDUCTOR_SMTP_URL: z.optional(
    z.string().check(z.url(), z.regex(/^smtps?:\/\//i, 'must be an smtp:// or smtps:// URL')),
  ),
  /** The From address of email notifications. */
  CONDUCTOR_SMTP_FROM: z._default(z.string().check(z.email()), 'conductor@localhost'),
  /** A notification still undelivered this long after its job finished is given up. */
  CONDUCTOR_NOTIFY_GIVE_UP_H: z._default(positiveInt(24 * 7), 6),
  // The push channel (docs/runner.md, "The push channel"; issue #52).
  /** The WebSocket URL runners connect to (API Gateway's wss://…/stage); unset: no channel offered. */
  CONDUCTOR_CHANNEL_URL: z.optional(
    z.string().check(z.url(), z.regex(/^wss?:\/\//i, 'must be a ws:// or wss:// URL')),
  ),
  /** Its management API (https://…/stage), where hints are posted to connections. */
  CONDUCTOR_CHANNEL_ENDPOINT: z.optional(z.string().check(z.url())),
  /** The bucket of its connection registry; unset: the idle gate's. */
  CONDUCTOR_CHANNEL_BUCKET: z.optional(z.string().check(z.minLength(1))),
  /** The S3 endpoint of that bucket (tests, private endpoints); unset: the region's. */
  CONDUCTOR_CHANNEL_S3_ENDPOINT: z.optional(z.string().check(z.url())),
  // Runner pools (docs/runner.md, "Runner pools").
  /** The ECS API's endpoint for the ecs provider (tests, private endpoints); unset: the region's. */
  CONDUCTOR_ECS_ENDPOINT: z.optional(z.string().check(z.url())),
  /** The S3 endpoint the ecs provider writes runner token files to; unset: the region's. */
  CONDUCTOR_RUNNER_TOKEN_S3_ENDPOINT: z.optional(z.string().check(z.url())),
  /** The key prefix of runner token files in a pool's token_bucket. */
  CONDUCTOR_RUNNER_TOKEN_PREFIX: z._default(
    z.string().check(z.minLength(1), z.maxLength(200)),
    'runner-tokens/',
  ),
});
export type Config = Readonly<z.infer<typeof ConfigSchema>>;

/** Raised for an environment variable that is present but wrong. */
export class ConfigError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'ConfigError';
  }
}

/** Reads and validates the configuration from `env`; an empty string counts as unset. */
export function loadConfig(env: NodeJS.ProcessEnv = process.env): Config {
  const present = Object.fromEntries(
    Object.keys(ConfigSchema.shape)
      .filter((k) => env[k] !== undefined && env[k] !== '')
      .map((k) => [k, env[k]]),
  );
  const parsed = ConfigSchema.safeParse(present);
  if (!parsed.success) {
    throw new ConfigError(
      parsed.error.issues.map((i) => `${i.path.join('.')}: ${i.message}`).join('; '),
    );
  }
  return Object.freeze(parsed.data);
}
