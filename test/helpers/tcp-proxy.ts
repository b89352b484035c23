// A TCP proxy between the code under test and PostgreSQL, so that a test can
// make the network misbehave at an exact point of the wire protocol: lose a
// reply after the server committed (the server saw the statement and answered;
// the client never hears it), or go silent (a half-open connection: nothing
// comes back and nothing says the connection is gone).
import net from 'node:net';

/** What happens to a connection once the client sent a message containing the marker. */
export type WireFault =
  /** The statement reaches the server; once the server answered ReadyForQuery (committed), both sides are cut and the reply is dropped. */
  | 'lose-reply'
  /** The statement reaches the server; from then on nothing passes either way and the sockets stay open. */
  | 'freeze'
  /** The message reaches the server; that connection's replies are then held as by holdReplies, until releaseReplies. */
  | 'hold-replies';

export interface TcpProxy {
  port: number;
  /** `url` with its host and port replaced by the proxy's. */
  url(url: string): string;
  /**
   * Arms one fault: the next client message (on any connection) containing
   * `marker` triggers it. Resolves once the fault has happened (for
   * 'lose-reply', after the server's reply was dropped). `beforeCut` runs
   * after the server answered and before the client's side is cut, so a
   * test can act while the server has committed and the client does not
   * know it yet.
   */
  once(marker: string, fault: WireFault, beforeCut?: () => Promise<void>): Promise<void>;
  /** Every connection, old and new, stops passing bytes (kept in the sockets' buffers). */
  freezeAll(): void;
  /** Bytes pass again, buffered ones first. */
  thawAll(): void;
  /**
   * The server's bytes, on every connection old and new, are read and kept
   * instead of passed on (the client's still reach the server). A server that
   * closes meanwhile keeps its connection's client side open until release.
   */
  holdReplies(): void;
  /**
   * Passes on what was held, each connection's bytes in one write (so the
   * client reads them together, as one TCP segment on loopback), then closes
   * the client side of those whose server had closed.
   */
  releaseReplies(): void;
  /** Per connection with held bytes: how many, and whether its server has closed. */
  held(): Array<{ bytes: number; serverClosed: boolean }>;
  /** Connections the proxy has accepted so far. */
  accepted(): number;
  /** Connections open through the proxy right now. */
  open(): number;
  close(): Promise<void>;
}

interface Pair {
  client: net.Socket;
  server: net.Socket;
  frozen: boolean;
  holding: boolean;
  held: Buffer[];
  serverClosed: boolean;
}

// ReadyForQuery: 'Z', length 5, then the transaction status. Seen after a
// statement's reply, the implicit transaction has committed or rolled back.
const READY_FOR_QUERY = Buffer.from([0x5a, 0, 0, 0, 5]);

/** Starts a proxy on loopback to the server of `targetUrl`. */
export async function startTcpProxy(targetUrl: string): Promise<TcpProxy> {
  const target = new URL(targetUrl);
  const host = target.hostname || '127.0.0.1';
  const port = Number(target.port || 5432);
  const pairs = new Set<Pair>();
  let allFrozen = false;
  let holding = false;
  let accepted = 0;
  interface Armed {
    marker: Buffer;
    fault: WireFault;
    beforeCut?: () => Promise<void>;
    done: () => void;
  }
  const armed: Armed[] = [];

  const pause = (p: Pair) => {
    p.client.pause();
    p.server.pause();
  };
  const resume = (p: Pair) => {
    if (p.frozen || allFrozen) return;
    p.client.resume();
    p.server.resume();
  };

  const proxy = net.createServer((client) => {
    accepted++;
    const server = net.connect(port, host);
    const pair: Pair = {
      client,
      server,
      frozen: false,
      holding: false,
      held: [],
      serverClosed: false,
    };
    pairs.add(pair);
    let losing: Armed | null = null;
    const end = () => {
      pairs.delete(pair);
      client.destroy();
      server.destroy();
    };
    // While replies are held, a server that closed has said its last words
    // into the held bytes: the client hears them, and the close, at release.
    const serverGone = () => {
      if ((holding || pair.holding) && pair.held.length > 0) pair.serverClosed = true;
      else end();
    };
    client.on('error', end);
    server.on('error', serverGone);
    client.on('close', end);
    server.on('close', serverGone);
    client.on('data', (chunk: Buffer) => {
      const i = armed.findIndex((a) => chunk.includes(a.marker));
      if (i < 0) {
        server.write(chunk);
        return;
      }
      const [fault] = armed.splice(i, 1);
      server.write(chunk);
      if (fault!.fault === 'freeze') {
        pair.frozen = true;
        pause(pair);
        fault!.done();
      } else if (fault!.fault === 'hold-replies') {
        pair.holding = true;
        fault!.done();
      } else {
        losing = fault!;
      }
    });
    server.on('data', (chunk: Buffer) => {
      if (losing) {
        // Swallow the reply; cut once the server is done with the statement.
        if (chunk.includes(READY_FOR_QUERY)) {
          const fault = losing;
          losing = null;
          void (async () => {
            try {
              await fault.beforeCut?.();
            } finally {
              end();
              fault.done();
            }
          })();
        }
        return;
      }
      if (holding || pair.holding) {
        pair.held.push(chunk);
        return;
      }
      client.write(chunk);
    });
    if (allFrozen) pause(pair);
  });
  await new Promise<void>((resolve) => proxy.listen(0, '127.0.0.1', resolve));
  const address = proxy.address() as net.AddressInfo;

  return {
    port: address.port,
    url(url: string) {
      const u = new URL(url);
      u.hostname = '127.0.0.1';
      u.port = String(address.port);
      return u.toString();
    },
    once(marker, fault, beforeCut) {
      return new Promise<void>((done) =>
        armed.push({ marker: Buffer.from(marker), fault, beforeCut, done }),
      );
    },
    freezeAll() {
      allFrozen = true;
      for (const p of pairs) pause(p);
    },
    thawAll() {
      allFrozen = false;
      for (const p of pairs) resume(p);
    },
    holdReplies() {
      holding = true;
    },
    releaseReplies() {
      holding = false;
      for (const p of [...pairs]) {
        p.holding = false;
        if (p.held.length === 0) continue;
        const bytes = Buffer.concat(p.held);
        p.held = [];
        if (p.serverClosed) {
          p.client.end(bytes);
          pairs.delete(p);
        } else {
          p.client.write(bytes);
        }
      }
    },
    held: () =>
      [...pairs]
        .filter((p) => p.held.length > 0)
        .map((p) => ({
          bytes: p.held.reduce((n, b) => n + b.length, 0),
          serverClosed: p.serverClosed,
        })),
    accepted: () => accepted,
    open: () => pairs.size,
    async close() {
      for (const p of pairs) {
        p.client.destroy();
        p.server.destroy();
      }
      pairs.clear();
      await new Promise<void>((resolve) => proxy.close(() => resolve()));
    },
  };
}
