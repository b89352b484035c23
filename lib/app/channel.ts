// The push channel on AWS (issue #52; docs/runner.md, "The push channel"):
// an idle runner holds a WebSocket to API Gateway instead of polling, and
// after each commit that may make a task claimable the control plane posts a
// small "claimable" hint to the connections whose runners may claim it. The
// hint is never a grant: the runner then claims as always (conductor_claim
// decides). Nothing here opens a database connection for an idle runner: its
// ticket is checked by signature, its connection kept in S3.

import { credentialsFromEnv } from '../aws-sign.ts';
import { postToConnection } from '../channel/post.ts';
import { type ConnectionRegistry, S3ConnectionRegistry } from '../channel/registry.ts';
import {
  issueTicket,
  serves,
  type Ticket,
  TicketError,
  type TicketScope,
  verifyTicket,
} from '../channel/ticket.ts';
import type { AppContext } from '../context.ts';
import { lookUpToken } from '../idle/workers.ts';
import { log } from '../log.ts';

/** The hint a connection is sent: no task, no id, nothing to act on but "claim now". */
export const HINT = JSON.stringify({ type: 'claimable' });

const registries = new WeakMap<AppContext, ConnectionRegistry>();

/** The connection registry the configuration names (the channel's bucket, else the gate's); undefined: no channel. */
export function channelRegistry(ctx: AppContext): ConnectionRegistry | undefined {
  const known = registries.get(ctx);
  if (known) return known;
  const c = ctx.config;
  const bucket = c.CONDUCTOR_CHANNEL_BUCKET ?? c.CONDUCTOR_GATE_BUCKET;
  if (!c.CONDUCTOR_CHANNEL_URL || !c.CONDUCTOR_CHANNEL_ENDPOINT || !bucket) return undefined;
  const endpoint = c.CONDUCTOR_CHANNEL_S3_ENDPOINT;
  const registry = new S3ConnectionRegistry(bucket, () => ({
    ...credentialsFromEnv(),
    ...(endpoint ? { endpoint } : {}),
  }));
  registries.set(ctx, registry);
  return registry;
}

/** Installs a registry (tests of the use cases). */
export function setChannelRegistry(ctx: AppContext, registry: ConnectionRegistry): void {
  registries.set(ctx, registry);
}

/** What a runner is offered: where to connect, and its ticket. */
export interface ChannelOffer {
  url: string;
  ticket: string;
}

/**
 * The channel offered to the worker whose token hashes to `tokenHash`, or
 * undefined (no channel configured; an ephemeral worker, which claims once;
 * a token revoked). Read from the idle gate's bucket when it knows the
 * token, so a closed gate's answer stays without the database; else from
 * the workers table (the database is awake: the claim just ran there).
 */
export async function channelOffer(
  ctx: AppContext,
  tokenHash: Buffer,
): Promise<ChannelOffer | undefined> {
  const url = ctx.config.CONDUCTOR_CHANNEL_URL;
  if (!url || !channelRegistry(ctx)) return undefined;
  try {
    let scope: Omit<TicketScope, 'worker'> | undefined;
    const found = ctx.gate ? await lookUpToken(ctx.gate, tokenHash) : undefined;
    if (found?.kind === 'refused') return undefined;
    if (found?.kind === 'known') {
      if (found.entry.ephemeral) return undefined;
      scope = found.entry;
    } else {
      const { rows } = await ctx.pool.query<{
        labels: string[];
        untrusted: boolean;
        projects: string[] | null;
      }>(
        `select labels, untrusted, projects from workers
          where token_hash = $1 and not revoked and not ephemeral`,
        [tokenHash],
      );
      const w = rows[0];
      if (!w) return undefined;
      scope = { labels: w.labels, untrusted: w.untrusted, projects: w.projects ?? '*' };
    }
    const ticket = issueTicket(ctx.keyring, {
      worker: tokenHash.toString('hex').slice(0, 16),
      labels: scope.labels,
      untrusted: scope.untrusted,
      projects: scope.projects,
    });
    return { url, ticket };
  } catch (err) {
    // No offer: the runner polls, as without a channel.
    log('warn', 'channel: could not offer the push channel', { err });
    return undefined;
  }
}

/**
 * `$connect`: lets a runner in when its ticket verifies, and records the
 * connection with the ticket's scope. Answers the HTTP status API Gateway
 * gives the upgrade (401 for a bad ticket: the runner polls).
 */
export async function channelConnect(
  ctx: AppContext,
  connectionId: string,
  ticket: string | undefined,
): Promise<{ status: number; ticket?: Ticket }> {
  const registry = channelRegistry(ctx);
  if (!registry) return { status: 404 };
  let t: Ticket;
  try {
    t = verifyTicket(ctx.keyring, ticket ?? '');
  } catch (err) {
    if (err instanceof TicketError) {
      log('info', 'channel: a connect was refused', { reason: err.message });
      return { status: 401 };
    }
    throw err;
  }
  const { exp: _, ...scope } = t;
  await registry.add({ id: connectionId, scope });
  return { status: 200, ticket: t };
}

/** `$disconnect`: forgets the connection. */
export async function channelDisconnect(ctx: AppContext, connectionId: string): Promise<void> {
  await channelRegistry(ctx)?.remove(connectionId);
}

/** The claimable tasks' shapes of one job (its tasks queued now), to match connections against. */
async function claimableShapes(
  ctx: AppContext,
  jobId: string,
): Promise<{ labels: string[]; trusted: boolean; project: string }[]> {
  const { rows } = await ctx.pool.query<{ labels: string[]; trusted: boolean; project: string }>(
    `select distinct t.labels, t.trusted, j.project_id as project
       from tasks t join jobs j on j.id = t.job_id
      where t.job_id = $1 and t.state = 'queued'`,
    [jobId],
  );
  return rows;
}

/**
 * After a commit that may have made tasks claimable: posts the hint to every
 * connection whose runner may claim one of them (every connection when the
 * transition names no job), and forgets connections API Gateway no longer
 * has. Never throws: a hint lost costs its runner at most one poll.
 */
export async function hintRunners(ctx: AppContext, jobId?: string): Promise<number> {
  const registry = channelRegistry(ctx);
  const endpoint = ctx.config.CONDUCTOR_CHANNEL_ENDPOINT;
  if (!registry || !endpoint) return 0;
  try {
    const connections = await registry.list();
    if (connections.length === 0) return 0;
    const shapes = jobId ? await claimableShapes(ctx, jobId) : undefined;
    if (shapes && shapes.length === 0) return 0;
    const wanted = connections.filter((c) => !shapes || shapes.some((s) => serves(c.scope, s)));
    const sent = await Promise.all(
      wanted.map(async (c) => {
        try {
          const r = await postToConnection(endpoint, c.id, HINT);
          if (r === 'gone') await registry.remove(c.id).catch(() => {});
          return r === 'sent';
        } catch (err) {
          log('warn', 'channel: a hint could not be posted', { err, connection: c.id });
          return false;
        }
      }),
    );
    return sent.filter(Boolean).length;
  } catch (err) {
    log('warn', 'channel: could not hint the runners', { err, job_id: jobId });
    return 0;
  }
}
