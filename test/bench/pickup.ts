// Push to task running with the runner idle (#52): the reference runner
// long-polling (the pickup channel) beside the same runner polling with its
// backoff, in the same run, on one stack.
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { join } from 'node:path';
import { signBody } from '../../lib/forge/webhook.ts';
import { type Runner, startRunner } from '../../runner/index.ts';
import { sha as shaOf } from '../e2e/payloads.ts';
import { giteaPush } from '../forge/fixtures/gitea.ts';
import { startStack } from './conductor.ts';
import { giteaBenchProject, httpClient, nowMs, percentile, sleep } from './util.ts';

export interface PickupSide {
  /** Push (the webhook sent) to the runner's task started, in ms, one per round. */
  times: number[];
  p50: number;
  max: number;
  /** Of that, the task queued (its commit) to claimed, on the database's clock: the pickup's own part. */
  queuedToClaimed: { p50: number; max: number };
}

export interface PickupLatency {
  idleS: number;
  rounds: number;
  longPoll: PickupSide;
  polling: PickupSide & { pollMaxS: number };
}

const side = (times: number[], waits: number[]): PickupSide => ({
  times,
  p50: percentile(times, 50),
  max: Math.max(...times),
  queuedToClaimed: { p50: percentile(waits, 50), max: Math.max(...waits) },
});

/**
 * Each round: both runners sit idle `idleS`, then a signed Gitea push for
 * each one's project (the order alternating round by round), timed from the
 * webhook's send to the runner's `task-started`. A first push each, not
 * counted, warms the compile. The runners use the shell executor; the fake
 * forge serves the pipeline file but no clone, so the tasks fail after
 * starting, which is not what is measured.
 */
export async function pickupLatency(
  url: string,
  dataDir: string,
  rounds: number,
  idleS: number,
): Promise<PickupLatency> {
  const pipelineOf = (label: string) =>
    `version: 1\nname: bench\ndefaults:\n  labels: [${label}]\ntasks:\n  a:\n    script: ['true']\n`;
  const forge = createServer((req, res) => {
    const label = /\/(pickup-[a-z]+)/.exec(req.url ?? '')?.[1] ?? 'none';
    const text = pipelineOf(label);
    res.writeHead(200, { 'content-type': 'text/plain', 'content-length': Buffer.byteLength(text) });
    res.end(text);
  });
  await new Promise<void>((done) => forge.listen(0, '127.0.0.1', () => done()));
  const forgeUrl = `http://127.0.0.1:${(forge.address() as AddressInfo).port}`;
  const stack = await startStack(url, dataDir, 10);
  const client = httpClient(stack.url, 4);
  const runners: Runner[] = [];
  const pollMaxS = 10;
  try {
    const admin = { authorization: `Bearer ${stack.adminToken}` };
    const sides = await Promise.all(
      (['long', 'poll'] as const).map(async (kind) => {
        const label = `pickup-${kind}`;
        const repo = `bench/${label}`;
        const secret = await giteaBenchProject(client, forgeUrl, label, repo, admin);
        const worker = await client.call(
          'POST',
          '/v1/workers',
          { name: label, labels: [label] },
          admin,
        );
        if (worker.status !== 201) throw new Error(`worker: ${worker.status} ${worker.body}`);
        const token = (JSON.parse(worker.body) as { token: string }).token;
        const started: number[] = [];
        runners.push(
          await startRunner({
            url: stack.url,
            token,
            sameUser: true,
            workdir: join(dataDir, `runner-${label}`),
            // The polling runner: today's backoff (500 ms doubling to 10 s).
            claimWaitS: kind === 'long' ? 25 : 0,
            pollMaxMs: pollMaxS * 1000,
            log: () => {},
            onEvent: (e) => {
              if (e.type === 'task-started') started.push(nowMs());
            },
          }),
        );
        let pushes = 0;
        /** Pushes a new commit and answers the ms until its task started. */
        const push = async (): Promise<number> => {
          const i = pushes++;
          const body = Buffer.from(
            JSON.stringify(giteaPush(repo, shaOf(`${label}-${i}`), { ref: `refs/heads/b${i}` })),
          );
          const before = started.length;
          const t0 = nowMs();
          const res = await client.call('POST', '/v1/webhooks/gitea', body, {
            'user-agent': 'Go-http-client/1.1',
            'X-Gitea-Event': 'push',
            'X-Gitea-Event-Type': 'push',
            'X-Gitea-Delivery': `${label}-${i}-${process.pid}`,
            'X-Gitea-Signature': signBody('gitea', body, secret),
          });
          if (res.status !== 202) throw new Error(`webhook: ${res.status} ${res.body}`);
          const giveUp = t0 + (pollMaxS + 20) * 1000;
          while (started.length === before && nowMs() < giveUp) await sleep(2);
          if (started.length === before) throw new Error(`${label}: the task did not start`);
          return started[before]! - t0;
        };
        /** The latest task's queued-to-claimed time, in ms. */
        const waited = async (): Promise<number> => {
          const { rows } = await stack.context.pool.query<{ ms: number }>(
            `select extract(epoch from (t.started_at - t.queued_at)) * 1000 as ms
               from tasks t join jobs j on j.id = t.job_id
              where j.project_id = $1 order by j.number desc limit 1`,
            [label],
          );
          return Number(rows[0]?.ms);
        };
        return { push, waited, times: [] as number[], waits: [] as number[] };
      }),
    );
    for (const s of sides) await s.push();
    for (let r = 0; r < rounds; r++) {
      await sleep(idleS * 1000);
      const order = r % 2 === 0 ? sides : [...sides].reverse();
      for (const s of order) {
        s.times.push(await s.push());
        s.waits.push(await s.waited());
      }
    }
    return {
      idleS,
      rounds,
      longPoll: side(sides[0]!.times, sides[0]!.waits),
      polling: { ...side(sides[1]!.times, sides[1]!.waits), pollMaxS },
    };
  } finally {
    await Promise.all(runners.map((r) => r.stop({ graceMs: 0 })));
    client.close();
    await stack.stop();
    await new Promise<void>((done) => forge.close(() => done()));
  }
}
