import {
  createServer,
  type IncomingHttpHeaders,
  type IncomingMessage,
  type ServerResponse,
} from 'node:http';
import type { AddressInfo } from 'node:net';

export interface SeenRequest {
  method: string;
  /** The path and query exactly as the client sent them. */
  url: string;
  headers: IncomingHttpHeaders;
}

export interface FakeForge {
  /** `http://127.0.0.1:<port>`, no trailing slash. */
  base: string;
  requests: SeenRequest[];
  close(): Promise<void>;
}

/** A real HTTP server on a free loopback port that records each request and answers with `handle`. */
export async function fakeForge(
  handle: (req: IncomingMessage, res: ServerResponse) => void,
): Promise<FakeForge> {
  const requests: SeenRequest[] = [];
  const server = createServer((req, res) => {
    requests.push({ method: req.method ?? '', url: req.url ?? '', headers: req.headers });
    handle(req, res);
  });
  await new Promise<void>((done) => server.listen(0, '127.0.0.1', done));
  const { port } = server.address() as AddressInfo;
  return {
    base: `http://127.0.0.1:${port}`,
    requests,
    close: () =>
      new Promise<void>((done) => {
        // A server that never answers still holds its sockets; drop them so close can finish.
        server.closeAllConnections();
        server.close(() => done());
      }),
  };
}

/** A loopback URL nothing listens on: a port that was free a moment ago. */
export async function closedPortUrl(): Promise<string> {
  const forge = await fakeForge((_req, res) => res.end());
  await forge.close();
  return forge.base;
}
