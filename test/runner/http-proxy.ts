// An HTTP proxy between a runner and the control plane that records each
// request and can lose an answer after the control plane gave it: the
// request reached the server and was acted on, and the runner's connection
// is closed without a reply, as when a reply is lost on the network.
import { createServer, type IncomingMessage, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { after } from 'node:test';

export interface Passed {
  path: string;
  /** The request's Idempotency-Key header. */
  key: string | undefined;
  /** What the control plane answered (0 when the proxy answered itself). */
  status: number;
  /** The answer never reached the runner. */
  dropped: boolean;
  at: number;
}

export interface HttpProxy {
  url: string;
  passed: Passed[];
}

/**
 * What to do with a request: `'drop'` after the control plane answered
 * `status`, or an answer of the proxy's own instead of forwarding.
 */
export type Rule = (
  req: { path: string; index: number },
  status?: number,
) => 'drop' | { status: number; headers: Record<string, string> } | undefined;

// Headers of one hop, which a proxy does not pass on.
const HOP = new Set([
  'connection',
  'keep-alive',
  'transfer-encoding',
  'content-length',
  'content-encoding',
  'host',
]);

/** Starts a proxy to `target`, closed when the test file ends. */
export async function startHttpProxy(
  target: string,
  rule: Rule = () => undefined,
): Promise<HttpProxy> {
  const passed: Passed[] = [];
  const server = createServer((req: IncomingMessage, res: ServerResponse) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', async () => {
      const path = req.url ?? '/';
      const index = passed.filter((p) => p.path === path).length;
      const raw = req.headers['idempotency-key'];
      const entry: Passed = {
        path,
        key: Array.isArray(raw) ? raw.join(',') : raw,
        status: 0,
        dropped: false,
        at: Date.now(),
      };
      passed.push(entry);
      const own = rule({ path, index });
      if (own && own !== 'drop') {
        res.writeHead(own.status, { 'content-type': 'application/json', ...own.headers });
        res.end(JSON.stringify({ error: { code: 'unavailable', message: 'from the proxy' } }));
        return;
      }
      const headers: Record<string, string> = {};
      for (const [name, value] of Object.entries(req.headers)) {
        if (!HOP.has(name) && typeof value === 'string') headers[name] = value;
      }
      let answer: Response;
      let body: Buffer;
      try {
        answer = await fetch(`${target}${path}`, {
          method: req.method ?? 'GET',
          headers,
          ...(chunks.length ? { body: Buffer.concat(chunks) } : {}),
        });
        body = Buffer.from(await answer.arrayBuffer());
      } catch {
        res.socket?.destroy();
        return;
      }
      entry.status = answer.status;
      if (rule({ path, index }, answer.status) === 'drop') {
        entry.dropped = true;
        res.socket?.destroy();
        return;
      }
      const out: Record<string, string> = {};
      answer.headers.forEach((value, name) => {
        if (!HOP.has(name)) out[name] = value;
      });
      res.writeHead(answer.status, out);
      res.end(body);
    });
  });
  await new Promise<void>((done) => server.listen(0, '127.0.0.1', done));
  after(
    () =>
      new Promise<void>((done) => {
        server.closeAllConnections();
        server.close(() => done());
      }),
  );
  const { port } = server.address() as AddressInfo;
  return { url: `http://127.0.0.1:${port}`, passed };
}
