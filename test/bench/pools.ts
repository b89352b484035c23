// Push to task running with a runner pool (#51): a task whose runner the
// `process` provider launches for it (a fresh runner process per task,
// started by the commit that queued it), beside a warm runner already
// waiting (the reference runner, in-process, its default long poll), in the
// same run, on one stack.
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { join } from 'node:path';
import type { ProcessProvider } from '../../lib/fleet/process.ts';
import { signBody } from '../../lib/forge/webhook.ts';
import { type Runner, startRunner } from '../../runner/index.ts';
import { sha as shaOf } from '../e2e/payloads.ts';
import { giteaPush } from '../forge/fixtures/gitea.ts';
import { startStack } from './conductor.ts';
import { giteaBenchProject, httpClient, nowMs, percentile, sleep } from './util.ts';

export interface PoolPickupSide {
  /** Push (the webhook sent) to the task running (claimed: its `started_at`), in ms, one per round. */
  times: number[];
  p50: number;
  max: number;
}

export interface PoolPickup {
  rounds: number;
  launched: PoolPickupSide;
  warm: PoolPickupSide;
}

const side = (times: number[]): PoolPickupSide => ({
  times,
  p50: percentile(times, 50),
  max: Math.max(...times),
});

/**
 * Each round: a signed Gitea push to each project (the order alternating
 * round by round), timed from the webhook's send to its task's `started_at`
 * (the claim's commit; both clocks are this machine's), then a pause until
 * the launched runner has exited. A first push each, not counted, warms the
 * compile. The fake forge serves the pipeline file but no clone, so the
 * tasks fail after starting, which is not what is measured.
 */
export async function poolPickup(
  url: string,
  dataDir: string,
  rounds: number,
): Promise<PoolPickup> {
  const pipelineOf = (label: string) =>
    `version: 1\nname: bench\ndefaults:\n  labels: [${label}]\n  retries: 0\ntasks:\n  a:\n    script: ['true']\n`;
  const forge = createServer((req, res) => {
    const label = /\/(fleet-[a-z]+)/.exec(req.url ?? '')?.[1] ?? 'none';
    const text = pipelineOf(label);
    res.writeHead(200, { 'content-type': 'text/plain', 'content-length': Buffer.byteLength(text) });
    res.end(text);
  });
  await new Promise<void>((done) => forge.listen(0, '127.0.0.1', () => done()));
  const forgeUrl = `http://127.0.0.1:${(forge.address() as AddressInfo).port}`;
  const stack = await startStack(url, dataDir, 10);
  const provider = stack.context.fleet?.process as ProcessProvider;
  const client = httpClient(stack.url, 4);
  const runners: Runner[] = [];
  try {
    const admin = { authorization: `Bearer ${stack.adminToken}` };
    const sides = await Promise.all(
      (['launched', 'warm'] as const).map(async (kind) => {
        const label = `fleet-${kind}`;
        const repo = `bench/${label}`;
        const secret = await giteaBenchProject(client, forgeUrl, label, repo, admin);
        if (kind === 'launched') {
          const pool = await client.call(
            'POST',
            '/v1/pools',
            {
              name: label,
              labels: [label],
              projects: [label],
              provider: 'process',
              max: 2,
              settings: { same_user: true, idle_limit_s: 10, workdir: join(dataDir, label) },
            },
            admin,
          );
          if (pool.status !== 201) throw new Error(`pool: ${pool.status} ${pool.body}`);
        } else {
          const worker = await client.call(
            'POST',
            '/v1/workers',
            { name: label, labels: [label] },
            admin,
          );
          if (worker.status !== 201) throw new Error(`worker: ${worker.status} ${worker.body}`);
          runners.push(
            await startRunner({
              url: stack.url,
              token: (JSON.parse(worker.body) as { token: string }).token,
              sameUser: true,
              workdir: join(dataDir, `runner-${label}`),
              log: () => {},
            }),
          );
        }
        let pushes = 0;
        /** Pushes a new commit and answers the ms until its task was claimed. */
        const push = async (): Promise<number> => {
          const i = pushes++;
          const body = Buffer.from(
            JSON.stringify(giteaPush(repo, shaOf(`${label}-${i}`), { ref: `refs/heads/b${i}` })),
          );
          const t0 = Date.now();
          const res = await client.call('POST', '/v1/webhooks/gitea', body, {
            'user-agent': 'Go-http-client/1.1',
            'X-Gitea-Event': 'push',
            'X-Gitea-Event-Type': 'push',
            'X-Gitea-Delivery': `${label}-${i}-${process.pid}`,
            'X-Gitea-Signature': signBody('gitea', body, secret),
          });
          if (res.status !== 202) throw new Error(`webhook: ${res.status} ${res.body}`);
          const giveUp = nowMs() + 60_000;
          while (nowMs() < giveUp) {
            const { rows } = await stack.context.pool.query<{ at: number | null }>(
              `select extract(epoch from t.started_at) * 1000 as at
                 from tasks t join jobs j on j.id = t.job_id
                where j.project_id = $1 and j.sha = $2`,
              [label, shaOf(`${label}-${i}`)],
            );
            const at = rows[0]?.at;
            if (at != null) return Number(at) - t0;
            await sleep(10);
          }
          throw new Error(`${label}: the task did not start`);
        };
        return { push, times: [] as number[] };
      }),
    );
    const settle = async () => {
      // The launched runner exits once its task is done; the next round starts with none.
      const until = nowMs() + 60_000;
      while (provider.pids().length > 0 && nowMs() < until) await sleep(50);
      await sleep(1_000);
    };
    for (const s of sides) await s.push();
    await settle();
    for (let r = 0; r < rounds; r++) {
      const order = r % 2 === 0 ? sides : [...sides].reverse();
      for (const s of order) s.times.push(await s.push());
      await settle();
    }
    return { rounds, launched: side(sides[0]!.times), warm: side(sides[1]!.times) };
  } finally {
    await Promise.all(runners.map((r) => r.stop({ graceMs: 0 })));
    client.close();
    await stack.stop();
    await new Promise<void>((done) => forge.close(() => done()));
  }
}

// Alone: node --import tsx test/bench/pools.ts DATABASE_URL [rounds]
if (import.meta.url === `file://${process.argv[1]}`) {
  const { mkdtemp } = await import('node:fs/promises');
  const { tmpdir } = await import('node:os');
  const dir = await mkdtemp(join(tmpdir(), 'conductor-bench-pools-'));
  const { migrated } = await import('./conductor.ts');
  await migrated(process.argv[2]!);
  const r = await poolPickup(process.argv[2]!, dir, Number(process.argv[3] ?? 5));
  console.log(JSON.stringify(r));
}
