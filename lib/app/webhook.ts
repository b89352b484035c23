// A forge's webhook, checked in the contract's order: size (the middleware),
// headers and payload, project, signature, then what the event asks for.
import { createHash } from 'node:crypto';
import type { AppContext } from '../context.ts';
import { AppError, BadRequestError, NotFoundError, UnauthorizedError } from '../errors.ts';
import { APP_FORGE } from '../forge/github/app.ts';
import { forgeOf } from '../forge/registry.ts';
import {
  defaultBranchOf,
  type ForgeKind,
  notJsonMessage,
  parseWebhook,
  readPushDiff,
  readWebhookHeaders,
  verifySignature,
  type WebhookIntent,
} from '../forge/webhook.ts';
import type { Reply } from '../http/index.ts';
import { awsIntake, forgetBody, messageBody } from '../idle/aws-intake.ts';
import {
  type DeliveryMessage,
  type DirectoryEntry,
  databaseAnswers,
  type WebhookIntake,
} from '../idle/intake.ts';
import { log } from '../log.ts';
import { cancelPullRequest, createJob } from '../scheduler/index.ts';
import { DEFAULT_FORGE, FORGES } from '../states.ts';
import {
  type AppDelivery,
  asAppDelivery,
  handleAppDelivery,
  verifyAppDelivery,
} from './github-app.ts';
import {
  findProjectByRepo,
  type ProjectRow,
  rememberDefaultBranch,
  webhookSecret,
} from './projects.ts';
import { deliverJobStatus } from './statuses.ts';
import { triggerJob } from './trigger.ts';

/** The forge a webhook route names (`/v1/webhooks/<forge>`); the routes name no other. */
export function forgeOfRoute(path: string): ForgeKind {
  const last = path.replace(/\/+$/, '').split('/').pop() ?? '';
  return FORGES.find((f) => f === last) ?? DEFAULT_FORGE;
}

/** The webhook queue's message (functions/webhook-queue.ts is invoked with one). */
export type { DeliveryMessage } from '../idle/intake.ts';

export const MAX_WEBHOOK_BYTES = 5 * 1024 * 1024;

/** A build's trust as the webhook can tell it. */
interface WebhookTrust {
  trusted: boolean;
  /** Logins the compile must confirm as writers first (the job starts untrusted). */
  confirmWriters: string[];
  reason: string;
}

/**
 * How far a build can be trusted from its delivery alone. A push and a
 * pull request from a branch of a GitHub repository are trusted; a fork's is
 * not, nor, unless the project's bot_pull_requests says `trusted`, a bot's
 * (a pull request a bot opened or updated, or a bot's push to a branch other
 * than the default); a Gitea pull request from the repository itself waits
 * for the compile to confirm its people as writers, which takes the project's
 * forge token and Gitea's URL (without them it is untrusted).
 */
export function webhookTrust(
  intent: Extract<WebhookIntent, { kind: 'build' }>,
  project: Pick<ProjectRow, 'repo' | 'forge_url' | 'forge_token_enc' | 'bot_pull_requests'>,
): WebhookTrust {
  const bots = project.bot_pull_requests === 'trusted' ? [] : (intent.bots ?? []);
  if (intent.trigger !== 'pull_request') {
    if (bots.length > 0) {
      return {
        trusted: false,
        confirmWriters: [],
        reason: `a push by the bot ${bots.join(' and ')} to a branch other than the default (the project's bot_pull_requests is untrusted)`,
      };
    }
    const what = intent.trigger === 'tag' ? 'a tag pushed' : 'a push';
    return { trusted: true, confirmWriters: [], reason: `${what} to the repository` };
  }
  // A fork's pull request is untrusted whoever sent it; the fork says more.
  const fromFork = intent.trusted === false && intent.confirmWriters === undefined;
  if (bots.length > 0 && !fromFork) {
    return {
      trusted: false,
      confirmWriters: [],
      reason: `a pull request of the bot ${bots.join(' and ')} (the project's bot_pull_requests is untrusted)`,
    };
  }
  if (intent.trusted) {
    return {
      trusted: true,
      confirmWriters: [],
      reason: 'a pull request from a branch of the repository',
    };
  }
  const logins = intent.confirmWriters;
  if (logins === undefined) {
    return { trusted: false, confirmWriters: [], reason: 'a pull request from a fork' };
  }
  const who = logins.join(' and ');
  if (logins.length === 0) {
    return {
      trusted: false,
      confirmWriters: [],
      reason: 'a pull request from the repository itself that names nobody for Gitea to confirm',
    };
  }
  if (project.forge_token_enc === null || !project.forge_url) {
    return {
      trusted: false,
      confirmWriters: [],
      reason: `a pull request from the repository itself, which anyone who can read it may open: without a forge token and forge_url Gitea cannot confirm that ${who} may write`,
    };
  }
  return {
    trusted: false,
    confirmWriters: logins,
    reason: `waiting for Gitea to confirm that ${who} may write to ${project.repo}`,
  };
}

/**
 * The checks that need no database, in the contract's order: headers, JSON,
 * the fields the event needs (400). Answers what the rest of the checks use.
 */
export function checkDelivery(
  forge: ForgeKind,
  headers: Record<string, string | undefined>,
  body: Buffer,
): {
  intent: WebhookIntent;
  delivery: string;
  signature: string | undefined;
  payload: unknown;
} {
  const { event, delivery, signature } = readWebhookHeaders(forge, headers);
  let payload: unknown;
  try {
    payload = JSON.parse(body.toString('utf8'));
  } catch {
    throw new BadRequestError(notJsonMessage(forge, headers, body));
  }
  return { intent: parseWebhook(forge, event, payload), delivery, signature, payload };
}

/**
 * A delivery of the GitHub App (its payload names an `installation`), read
 * with the 400s of checkDelivery; null for any other delivery.
 */
function readAppDelivery(
  forge: ForgeKind,
  headers: Record<string, string | undefined>,
  body: Buffer,
): AppDelivery | null {
  if (forge !== APP_FORGE) return null;
  const { event, delivery, signature } = readWebhookHeaders(forge, headers);
  let payload: unknown;
  try {
    payload = JSON.parse(body.toString('utf8'));
  } catch {
    throw new BadRequestError(notJsonMessage(forge, headers, body));
  }
  return asAppDelivery({ event, delivery, signature, payload });
}

/**
 * The command that registers a project for a repository no project has, with
 * what the payload tells of it (its clone URL, and Gitea's base URL): the
 * answer to the first push a newcomer's forge sends.
 */
export function createProjectCommand(forge: ForgeKind, repo: string, payload: unknown): string {
  const f = forgeOf(forge);
  // Only what can be pasted into a shell as it is: the payload is the sender's
  // text, and it is not yet known to come from the forge.
  const told = f.webhook.describe(payload, repo);
  const name = repo.split('/').pop() ?? '';
  const id =
    name
      .toLowerCase()
      .replace(/[^a-z0-9-]+/g, '-')
      .replace(/^-+/, '')
      .slice(0, 63) || 'my-project';
  const parts = ['npm run ctl -- project create', `--id ${id}`];
  if (forge !== DEFAULT_FORGE) parts.push(`--forge ${forge}`);
  parts.push(`--repo ${/^[A-Za-z0-9._/-]+$/.test(repo) ? repo : f.repoShape.toUpperCase()}`);
  parts.push(`--repo-url ${told.cloneUrl ?? '<clone URL>'}`);
  if (f.forgeUrl.required || told.forgeUrl) {
    parts.push(`--forge-url ${told.forgeUrl || `<${f.title} URL>`}`);
  }
  return parts.join(' ');
}

/** What a delivery that passed the signature check was verified against. */
export interface VerifiedBy {
  projectId: string;
  repo: string;
  /** The project's webhook secret, sealed as in the database. */
  secretEnc: string;
}

/**
 * One delivery, start to end: the checks, the project, the signature, then
 * what the event asks for. A new job is set on its way (triggerJob: its
 * compile dispatched, or its status posted when it waits for approval); the
 * jobs the delivery cancelled (superseded, or their pull request closed) have
 * their new statuses posted. The webhook function runs this directly; the
 * queue's consumer runs it for a delivery queued while the database was
 * resuming. Answers the reply and what the signature was checked against.
 */
export async function handleDelivery(
  ctx: AppContext,
  forge: ForgeKind,
  headers: Record<string, string | undefined>,
  body: Buffer,
  receivedAt?: Date,
): Promise<{ reply: Reply; verifiedBy?: VerifiedBy }> {
  // The GitHub App's deliveries carry no project's signature: the app's
  // secret signs them all (lib/app/github-app.ts).
  const app = readAppDelivery(forge, headers, body);
  if (app) {
    verifyAppDelivery(ctx.config, body, app);
    const reply = await handleAppDelivery(ctx, app, (project, intent) =>
      afterVerified(ctx, project, intent, app.delivery, body, app.payload, receivedAt),
    );
    return { reply };
  }
  const { intent, delivery, signature, payload } = checkDelivery(forge, headers, body);
  const project = await findProjectByRepo(ctx.pool, forge, intent.repo);
  if (!project) {
    const command = createProjectCommand(forge, intent.repo, payload);
    // Logged: the forge keeps the answer in its delivery log, where the
    // person running `npm start` is not looking.
    log('warn', 'a webhook for a repository that no project has', {
      forge,
      repo: intent.repo,
      delivery,
      create: command,
    });
    throw new NotFoundError(`no ${forge} project for ${intent.repo}; create one with: ${command}`);
  }
  if (!verifySignature(forge, body, webhookSecret(ctx.keyring, project), signature)) {
    throw new UnauthorizedError('the webhook signature is missing or wrong');
  }
  const verifiedBy = {
    projectId: project.id,
    repo: intent.repo,
    secretEnc: project.webhook_secret_enc,
  };
  return {
    verifiedBy,
    reply: await afterVerified(ctx, project, intent, delivery, body, payload, receivedAt),
  };
}

async function afterVerified(
  ctx: AppContext,
  project: ProjectRow,
  intent: WebhookIntent,
  delivery: string,
  body: Buffer,
  payload: unknown,
  receivedAt?: Date,
): Promise<Reply> {
  const { pool } = ctx;
  if (!project.enabled) return { status: 200, body: { ignored: 'the project is disabled' } };
  // The forge says the repository's default branch in every push and pull
  // request; kept when it changes (cache scopes, the Run form).
  const defaultBranch = defaultBranchOf(project.forge, payload);
  if (defaultBranch !== undefined && defaultBranch !== project.default_branch) {
    await rememberDefaultBranch(pool, project.id, defaultBranch);
  }
  if (intent.kind === 'ignore') return { status: 200, body: { ignored: intent.reason } };
  if (intent.kind === 'close_pull_request') {
    const cancelled = await cancelPullRequest(pool, project.id, intent.pullRequest);
    for (const jobId of cancelled) await deliverJobStatus(ctx, jobId);
    return {
      status: 200,
      body: {
        ignored: `pull request #${intent.pullRequest} was closed`,
        cancelled: cancelled.length,
      },
    };
  }
  const trust = webhookTrust(intent, project);
  // Untrusted for certain (nothing left to confirm): the project says what
  // becomes of it. A job still to be confirmed is created pending, and the
  // compile applies the same setting once Gitea has answered.
  const untrusted = !trust.trusted && trust.confirmWriters.length === 0;
  if (untrusted && project.fork_pull_requests === 'ignore') {
    return {
      status: 200,
      body: { ignored: `${trust.reason}; the project's fork_pull_requests is ignore` },
    };
  }
  const created = await createJob(pool, {
    projectId: project.id,
    ref: intent.ref,
    sha: intent.sha,
    trigger: intent.trigger,
    trusted: trust.trusted,
    confirmWriters: trust.confirmWriters,
    trustReason: trust.reason,
    blocked: untrusted && project.fork_pull_requests === 'approve',
    pullRequest: intent.pullRequest,
    baseRef: intent.baseRef,
    // What the changes: filters are decided on (lib/app/changes.ts).
    ...(intent.trigger === 'push' ? { push: readPushDiff(project.forge, payload) } : {}),
    deliveryId: delivery,
    // The signature covers the body, not the delivery id: a signed body
    // accepted before is answered as a duplicate whatever id it comes with.
    bodySha256: createHash('sha256').update(body).digest(),
    // Superseding goes by when the API received it, not by the job number
    // (a queued delivery is handled after later ones).
    receivedAt: receivedAt ?? null,
  });
  if (created.duplicate) {
    return {
      status: 200,
      body: { job_id: created.job.id, number: created.job.number, duplicate: true },
    };
  }
  // A blocked job is compiled once it is approved.
  await triggerJob(ctx, created.job, created.superseded);
  return { status: 202, body: { job_id: created.job.id, number: created.job.number } };
}

// The sealed secret each repository's directory entry was last written with,
// so a delivery writes the entry only when it changed.
const published = new Map<string, string>();

/** The directory entry's secret, or undefined when the keyring cannot open it (then only the database can say). */
function directorySecret(ctx: AppContext, entry: DirectoryEntry): string | undefined {
  try {
    return webhookSecret(ctx.keyring, {
      id: entry.projectId,
      webhook_secret_enc: entry.secretEnc,
    } as ProjectRow);
  } catch (err) {
    log('warn', 'a webhook directory entry that cannot be opened', { err, repo: entry.repo });
    return undefined;
  }
}

function intakeOf(ctx: AppContext): WebhookIntake | undefined {
  const { CONDUCTOR_WEBHOOK_CONSUMER: queue, CONDUCTOR_GATE_BUCKET: bucket } = ctx.config;
  if (!ctx.intake && queue && bucket) ctx.intake = awsIntake(queue, bucket);
  return ctx.intake;
}

/**
 * POST /v1/webhooks/github and /v1/webhooks/gitea. With a queue configured
 * (deployed), a delivery the database cannot take within
 * CONDUCTOR_WEBHOOK_DB_WAIT_MS is queued if its signature checks against the
 * directory, and answered `202 {"queued": true, "delivery"}`; anything else
 * takes the direct path (handleDelivery) and every answer of the contract
 * (docs/deploy.md, "Webhooks while the database resumes").
 */
export async function receiveWebhook(
  ctx: AppContext,
  forge: ForgeKind,
  headers: Record<string, string | undefined>,
  body: Buffer,
  receivedAt: Date = new Date(),
): Promise<Reply> {
  const intake = intakeOf(ctx);
  const app = intake ? readAppDelivery(forge, headers, body) : null;
  if (intake && app) {
    // The app's secret is configuration: a bad signature is answered 401
    // without a connection, and a good one is queued while the database resumes.
    verifyAppDelivery(ctx.config, body, app);
    if (!(await databaseAnswers(ctx.pool, ctx.config.CONDUCTOR_WEBHOOK_DB_WAIT_MS))) {
      await intake.queue.send({ forge, headers, body, receivedAt });
      log('info', 'the database did not answer in time: delivery queued', {
        delivery: app.delivery,
        vouched: true,
      });
      return { status: 202, body: { queued: true, delivery: app.delivery } };
    }
  } else if (intake) {
    // 400s first: they need no database.
    const { intent, delivery, signature } = checkDelivery(forge, headers, body);
    // Then the signature, against the directory: a delivery it refuses is
    // answered 401 without a connection, so a stranger cannot wake the
    // database. Rotating a project's secret rewrites its entry.
    const entry = await intake.directory.get(forge, intent.repo).catch((err) => {
      log('warn', 'could not read the webhook directory', { err });
      return undefined;
    });
    const secret = entry ? directorySecret(ctx, entry) : undefined;
    if (secret !== undefined && !verifySignature(forge, body, secret, signature)) {
      throw new UnauthorizedError('the webhook signature is missing or wrong');
    }
    if (!(await databaseAnswers(ctx.pool, ctx.config.CONDUCTOR_WEBHOOK_DB_WAIT_MS))) {
      // Verified by the directory, or unknown to it (a new project, an
      // unreadable entry): queued all the same, and the consumer answers an
      // unknown repository or a bad signature 404 or 401 in its log. Waiting
      // for the database here could outlast the forge's patience.
      await intake.queue.send({ forge, headers, body, receivedAt });
      log('info', 'the database did not answer in time: delivery queued', {
        delivery,
        vouched: secret !== undefined,
      });
      return { status: 202, body: { queued: true, delivery } };
    }
  }
  const { reply, verifiedBy } = await handleDelivery(ctx, forge, headers, body, receivedAt);
  if (
    intake &&
    verifiedBy &&
    published.get(`${forge} ${verifiedBy.repo}`) !== verifiedBy.secretEnc
  ) {
    await intake.directory
      .put(forge, verifiedBy)
      .then(() => published.set(`${forge} ${verifiedBy.repo}`, verifiedBy.secretEnc))
      .catch((err) => log('warn', 'could not write the webhook directory', { err }));
  }
  return reply;
}

/**
 * One message of the webhook queue: a delivery queued while the database was
 * resuming goes through the same handling as a direct one (signature,
 * dedupe, job, compile, statuses). A delivery the contract would refuse (a
 * 4xx: no project, a bad signature) or a message that is not JSON is logged
 * and dropped; answers false for any other failure, which leaves it on the
 * queue for another try (Lambda retries the invocation twice; then the
 * dead-letter queue keeps it).
 */
export async function handleQueuedDelivery(
  ctx: AppContext,
  record: { messageId: string; body: string },
): Promise<boolean> {
  const bucket = ctx.config.CONDUCTOR_GATE_BUCKET;
  let message: DeliveryMessage;
  try {
    message = JSON.parse(record.body) as DeliveryMessage;
  } catch (err) {
    log('error', 'a webhook queue message that is not JSON: dropped', {
      err,
      id: record.messageId,
    });
    return true;
  }
  try {
    const body = await messageBody(message, bucket);
    const receivedAt = message.receivedAt ? new Date(message.receivedAt) : undefined;
    const { reply } = await handleDelivery(ctx, message.forge, message.headers, body, receivedAt);
    log('info', 'queued webhook delivery handled', { status: reply.status, body: reply.body });
    await forgetBody(message, bucket).catch(() => {});
    return true;
  } catch (err) {
    if (err instanceof AppError && err.status < 500) {
      log('warn', 'queued webhook delivery refused: dropped', { status: err.status, err });
      await forgetBody(message, bucket).catch(() => {});
      return true;
    }
    log('error', 'queued webhook delivery failed; it stays queued', { err });
    return false;
  }
}
