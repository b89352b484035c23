// A fake API Gateway WebSocket API on loopback (issue #52): what runners
// connect to, and the management API (`POST /{stage}/@connections/{id}`)
// the control plane posts hints through. As the real one, it invokes the
// channel function (functions/channel.ts) for $connect (refusing the upgrade
// with the status it answers), $default and $disconnect, names each
// connection with an id of its own, and checks each @connections request's
// SigV4 signature (service execute-api, the region, the key) by recomputing
// it with the AWS SDK's own signer; a connection it no longer has is a 410.
import { randomBytes } from 'node:crypto';
import { createServer, type IncomingMessage } from 'node:http';
import type { AddressInfo } from 'node:net';
import { after } from 'node:test';
import { SignatureV4 } from '@smithy/signature-v4';
import { type WebSocket, WebSocketServer } from 'ws';
import { handler } from '../../functions/channel.ts';
import { Sha256 } from './sdk-sha256.ts';

export interface FakeApiGateway {
  /** wss-like URL runners connect to (ws:// on loopback). */
  url: string;
  /** The management API's endpoint. */
  endpoint: string;
  /** Open connections by id. */
  connections: Map<string, WebSocket>;
  /** Hints posted (accepted) and requests refused, for the tests to read. */
  posted: { id: string; data: string }[];
  refused: string[];
  /** While set, posts are answered 200 and dropped (a hint lost on its way). */
  dropPosts: boolean;
  /** While set, every new connection is refused 503 (API Gateway down: the runners poll). */
  refuseConnects: boolean;
  /** Closes every connection (the channel down; each runner polls until offered again). */
  closeAll(): void;
  close(): Promise<void>;
}

const STAGE = 'live';

/** Starts the fake on port 0; stopped when the file ends. */
export async function startFakeApiGateway(opts: {
  region: string;
  accessKeyId: string;
  secretAccessKey: string;
}): Promise<FakeApiGateway> {
  const signer = new SignatureV4({
    service: 'execute-api',
    region: opts.region,
    credentials: { accessKeyId: opts.accessKeyId, secretAccessKey: opts.secretAccessKey },
    sha256: Sha256,
  });
  const connections = new Map<string, WebSocket>();
  const posted: { id: string; data: string }[] = [];
  const refused: string[] = [];
  const wss = new WebSocketServer({ noServer: true });

  async function badSignature(req: IncomingMessage, raw: string): Promise<string | undefined> {
    const auth = String(req.headers.authorization ?? '');
    const m =
      /^AWS4-HMAC-SHA256 Credential=([^/]+)\/(\d{8})\/([^/]+)\/([^/]+)\/aws4_request, SignedHeaders=([^,]+), Signature=([0-9a-f]{64})$/.exec(
        auth,
      );
    if (!m) return `no SigV4 Authorization header: ${auth}`;
    if (m[1] !== opts.accessKeyId) return `signed with key ${m[1]}`;
    if (m[3] !== opts.region || m[4] !== 'execute-api') return `signed for ${m[3]}/${m[4]}`;
    const d = /^(\d{4})(\d{2})(\d{2})T(\d{2})(\d{2})(\d{2})Z$/.exec(
      String(req.headers['x-amz-date'] ?? ''),
    );
    if (!d) return 'no x-amz-date';
    const signed: Record<string, string> = {};
    for (const name of m[5]!.split(';')) signed[name] = String(req.headers[name] ?? '');
    if (!('host' in signed)) return 'host is not signed';
    const again = await signer.sign(
      {
        method: req.method ?? 'POST',
        protocol: 'http:',
        hostname: '127.0.0.1',
        path: req.url ?? '/',
        headers: signed,
        body: raw,
      },
      { signingDate: new Date(`${d[1]}-${d[2]}-${d[3]}T${d[4]}:${d[5]}:${d[6]}Z`) },
    );
    return again.headers.authorization === auth ? undefined : 'the signature does not match';
  }

  const server = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', async () => {
      const raw = Buffer.concat(chunks).toString('utf8');
      const m = new RegExp(`^/${STAGE}/@connections/([^/?]+)$`).exec(req.url ?? '');
      if (req.method !== 'POST' || !m) {
        res.writeHead(404).end('{"message":"Not Found"}');
        return;
      }
      const problem = await badSignature(req, raw);
      if (problem) {
        refused.push(problem);
        res.writeHead(403).end(JSON.stringify({ message: problem }));
        return;
      }
      const id = decodeURIComponent(m[1]!);
      const ws = connections.get(id);
      if (!ws) {
        res.writeHead(410).end('{"message":"GoneException"}');
        return;
      }
      if (raw.length > 128 * 1024) {
        res.writeHead(413).end('{"message":"PayloadTooLarge"}');
        return;
      }
      posted.push({ id, data: raw });
      if (!fake.dropPosts) ws.send(raw);
      res.writeHead(200).end();
    });
  });

  server.on('upgrade', async (req, socket, head) => {
    if (!(req.url ?? '').startsWith(`/${STAGE}`)) {
      socket.end('HTTP/1.1 404 Not Found\r\n\r\n');
      return;
    }
    if (fake.refuseConnects) {
      socket.end('HTTP/1.1 503 Service Unavailable\r\nconnection: close\r\n\r\n');
      return;
    }
    const connectionId = `${randomBytes(9).toString('base64')}=`;
    const url = new URL(req.url ?? '/', 'http://x');
    const headers: Record<string, string> = {};
    for (const [k, v] of Object.entries(req.headers)) if (typeof v === 'string') headers[k] = v;
    const answer = await handler({
      requestContext: { routeKey: '$connect', connectionId },
      headers,
      queryStringParameters: Object.fromEntries(url.searchParams),
    });
    if (answer.statusCode !== 200) {
      socket.end(`HTTP/1.1 ${answer.statusCode} Refused\r\nconnection: close\r\n\r\n`);
      return;
    }
    wss.handleUpgrade(req, socket, head, (ws) => {
      connections.set(connectionId, ws);
      ws.on('message', (data) => {
        void handler({
          requestContext: { routeKey: '$default', connectionId },
          body: String(data),
        });
      });
      ws.on('close', () => {
        connections.delete(connectionId);
        void handler({ requestContext: { routeKey: '$disconnect', connectionId } });
      });
    });
  });

  await new Promise<void>((done) => server.listen(0, '127.0.0.1', () => done()));
  const port = (server.address() as AddressInfo).port;
  const fake: FakeApiGateway = {
    url: `ws://127.0.0.1:${port}/${STAGE}`,
    endpoint: `http://127.0.0.1:${port}/${STAGE}`,
    connections,
    posted,
    refused,
    dropPosts: false,
    refuseConnects: false,
    closeAll() {
      for (const ws of connections.values()) ws.close(1001, 'going away');
    },
    async close() {
      for (const ws of connections.values()) ws.terminate();
      wss.close();
      server.closeAllConnections();
      await new Promise<void>((done) => server.close(() => done()));
    },
  };
  after(() => fake.close());
  return fake;
}
