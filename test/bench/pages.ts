// The job page's cost: the api function's time to answer GET /jobs/{id} for
// a job of 1,000 tasks (its database reads, the graph, the HTML and gzip), and
// the bytes it sends. The handler is invoked directly, as Lambda would,
// without the local server's HTTP in between.
import type { Context } from 'aws-lambda';
import { handler } from '../../functions/api.ts';
import type { HttpEvent } from '../../lib/http/index.ts';
import { newSession } from '../../lib/pages/access.ts';
import { clearLayouts } from '../../lib/pages/graph.ts';
import { createSession } from '../../lib/people/sessions.ts';
import type { TaskSpec } from '../../lib/scheduler/types.ts';
import { makeProject, spec, startedJob } from '../helpers/fixtures.ts';
import { startStack } from './conductor.ts';
import { nowMs, percentile } from './util.ts';

export interface PageRender {
  tasks: number;
  groups: number;
  samples: number;
  /** The first view of a shape: the graph laid out (dagre) before it is kept. */
  firstMs: number;
  p50: number;
  p99: number;
  /** The answer's bytes as sent with gzip, and without. */
  gzipBytes: number;
  htmlBytes: number;
}

/** 1,000 tasks: a build, three matrices (600, 200 and 197 expansions) and two fan-ins. */
function matrixJob(): TaskSpec[] {
  const out: TaskSpec[] = [spec('build')];
  const matrix = (base: string, n: number, needs: string[]) => {
    for (let i = 0; i < n; i++) {
      out.push(
        spec(`${base} (shard: ${i})`, { baseName: base, matrix: { shard: String(i) }, needs }),
      );
    }
  };
  matrix('test', 600, ['build']);
  matrix('lint', 200, []);
  matrix('integration', 197, ['build']);
  const tests = out.filter((t) => t.baseName !== 'build').map((t) => t.name);
  out.push(spec('package', { needs: ['build', ...tests] }));
  out.push(spec('deploy', { needs: ['package'] }));
  return out;
}

/** 1,000 tasks of their own (no matrix): ten layers of 100, each needing three of the layer before. */
function layeredJob(): TaskSpec[] {
  return Array.from({ length: 1_000 }, (_, i) => {
    const layer = Math.floor(i / 100);
    const needs =
      layer === 0 ? [] : [0, 1, 2].map((k) => `t${(layer - 1) * 100 + ((i * 7 + k * 13) % 100)}`);
    return spec(`t${i}`, { needs: [...new Set(needs)] });
  });
}

const CONTEXT = { getRemainingTimeInMillis: () => 30_000 } as unknown as Context;

/** Times GET /jobs/{id} through the api handler for both shapes of 1,000 tasks. */
export async function jobPageRender(
  url: string,
  dataDir: string,
  samples: number,
): Promise<{ matrix: PageRender; layered: PageRender }> {
  const stack = await startStack(url, dataDir, 4);
  try {
    const pool = stack.context.pool;
    // Sessions are rows (#31): each render reads its session from PostgreSQL.
    const session = newSession(stack.context.keyring, stack.adminToken);
    await createSession(pool, session.id, session.expiresS, { kind: 'admin' });
    const measure = async (tasks: TaskSpec[]): Promise<PageRender> => {
      const project = await makeProject(pool, { cancelSuperseded: false });
      const job = await startedJob(pool, project, tasks);
      // A job part way through: a third succeeded, some failed, the rest queued or waiting.
      await pool.query(
        `update tasks set state = case when position % 3 = 0 then 'success' else 'failed' end,
                attempt = 1, exit_code = case when position % 3 = 0 then 0 else 1 end,
                error = case when position % 3 = 0 then null else 'exit status 1' end,
                started_at = now() - interval '90 seconds', finished_at = now()
          where job_id = $1 and (position % 3 = 0 or position % 11 = 1)`,
        [job.id],
      );
      const event = (): HttpEvent =>
        ({
          version: '2.0',
          routeKey: 'GET /jobs/{id}',
          rawPath: `/jobs/${job.id}`,
          rawQueryString: '',
          cookies: [`conductor_session=${session.value}`],
          headers: { host: '127.0.0.1', 'accept-encoding': 'gzip' },
          pathParameters: { id: job.id },
          requestContext: { http: { method: 'GET', path: `/jobs/${job.id}` } },
          isBase64Encoded: false,
        }) as unknown as HttpEvent;
      const once = async () => {
        const t = nowMs();
        const res = await handler(event(), CONTEXT);
        const ms = nowMs() - t;
        if (res.statusCode !== 200)
          throw new Error(`GET /jobs/{id}: ${res.statusCode} ${res.body}`);
        return { ms, res };
      };
      clearLayouts();
      const first = await once();
      const times: number[] = [];
      for (let i = 0; i < samples; i++) times.push((await once()).ms);
      const gzipBytes = Buffer.from(first.res.body ?? '', 'base64').length;
      const plain = await handler({ ...event(), headers: { host: '127.0.0.1' } }, CONTEXT);
      return {
        tasks: tasks.length,
        groups: new Set(tasks.map((t) => t.baseName)).size,
        samples,
        firstMs: first.ms,
        p50: percentile(times, 50),
        p99: percentile(times, 99),
        gzipBytes,
        htmlBytes: Buffer.byteLength(plain.body ?? ''),
      };
    };
    return { matrix: await measure(matrixJob()), layered: await measure(layeredJob()) };
  } finally {
    await stack.stop();
  }
}
