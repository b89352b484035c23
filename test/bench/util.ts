// Small pieces shared by the benchmark: timing, percentiles, progress lines,
// and a keep-alive HTTP client for the local server.
import { Agent, request } from 'node:http';

export const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

const started = Date.now();

/** A progress line with the seconds since the benchmark started. */
export function progress(message: string): void {
  const s = ((Date.now() - started) / 1000).toFixed(1).padStart(6);
  process.stdout.write(`[${s}s] ${message}\n`);
}

/** The p-th percentile (0..100) of a list of numbers, nearest rank. */
export function percentile(values: number[], p: number): number {
  if (values.length === 0) return Number.NaN;
  const sorted = [...values].sort((a, b) => a - b);
  const rank = Math.min(sorted.length - 1, Math.max(0, Math.ceil((p / 100) * sorted.length) - 1));
  return sorted[rank]!;
}

export function nowMs(): number {
  return Number(process.hrtime.bigint()) / 1e6;
}

/** The result of a bounded throughput run. */
export interface Rate {
  /** Units of work done (cycles, jobs, commits). */
  done: number;
  /** Units that were asked for. */
  wanted: number;
  seconds: number;
  perSecond: number;
  /** True when the run hit its time limit before doing all the work. */
  partial: boolean;
}

export function rate(done: number, wanted: number, ms: number, partial: boolean): Rate {
  const seconds = ms / 1000;
  return { done, wanted, seconds, perSecond: seconds > 0 ? done / seconds : 0, partial };
}

export interface HttpAnswer {
  status: number;
  body: string;
}

/** A JSON client for one base URL over keep-alive connections (node:http Agent). */
export function httpClient(base: string, maxSockets: number) {
  const agent = new Agent({ keepAlive: true, maxSockets, maxFreeSockets: maxSockets });
  const url = new URL(base);
  function call(
    method: string,
    path: string,
    body?: unknown,
    headers: Record<string, string> = {},
  ): Promise<HttpAnswer> {
    const payload =
      body === undefined
        ? undefined
        : Buffer.isBuffer(body)
          ? body
          : Buffer.from(JSON.stringify(body));
    return new Promise((resolve, reject) => {
      const req = request(
        {
          agent,
          host: url.hostname,
          port: url.port,
          method,
          path,
          headers: {
            ...(payload
              ? { 'content-type': 'application/json', 'content-length': payload.length }
              : {}),
            ...headers,
          },
        },
        (res) => {
          const chunks: Buffer[] = [];
          res.on('data', (c: Buffer) => chunks.push(c));
          res.on('end', () =>
            resolve({ status: res.statusCode ?? 0, body: Buffer.concat(chunks).toString('utf8') }),
          );
          res.on('error', reject);
        },
      );
      req.on('error', reject);
      req.end(payload);
    });
  }
  return { call, close: () => agent.destroy() };
}

export type HttpClient = ReturnType<typeof httpClient>;

/**
 * A Gitea project on the fake forge at `forgeUrl`, made through the admin
 * API (the pickup and pool benches); answers its webhook secret.
 */
export async function giteaBenchProject(
  client: ReturnType<typeof httpClient>,
  forgeUrl: string,
  label: string,
  repo: string,
  admin: Record<string, string>,
): Promise<string> {
  const created = await client.call(
    'POST',
    '/v1/projects',
    {
      id: label,
      name: label,
      forge: 'gitea',
      repo,
      repo_url: `${forgeUrl}/${repo}.git`,
      forge_url: forgeUrl,
    },
    admin,
  );
  if (created.status !== 201) throw new Error(`project: ${created.status} ${created.body}`);
  return (JSON.parse(created.body) as { webhook_secret: string }).webhook_secret;
}
