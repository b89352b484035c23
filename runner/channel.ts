// The runner's end of the push channel (issue #52; docs/runner.md, "The push
// channel"): a WebSocket to where the control plane's empty claim said
// (API Gateway on AWS), opened with the ticket that came with it. A
// "claimable" message wakes the runner's wait so that it claims at once; the
// claim decides, as always. A keepalive message every 9 minutes keeps API
// Gateway from closing an idle socket (it answers no protocol ping). When the
// socket closes the runner polls with its backoff until the next offer.
import WebSocket from 'ws';
import type { ChannelOffer } from './client.ts';

/** API Gateway closes a connection idle for 10 minutes. */
const KEEPALIVE_MS = 9 * 60_000;
const CONNECT_TIMEOUT_MS = 10_000;

export class PushChannel {
  private socket: WebSocket | undefined;
  private keepalive: NodeJS.Timeout | undefined;
  private hinted = false;
  private wake: (() => void) | undefined;
  /** When the socket opened (ms since the epoch), or undefined while it is down. */
  upSince: number | undefined;

  constructor(
    private readonly log: (
      level: 'info' | 'warn',
      message: string,
      data?: Record<string, unknown>,
    ) => void,
    private readonly keepaliveMs = KEEPALIVE_MS,
  ) {}

  /** Whether the socket is open. */
  get up(): boolean {
    return this.socket?.readyState === WebSocket.OPEN;
  }

  /** Whether a socket is open or opening. */
  get connecting(): boolean {
    return this.socket !== undefined;
  }

  /** Opens the socket the offer names; never throws (a channel that does not open leaves the runner polling). */
  open(offer: ChannelOffer): void {
    if (this.socket) return;
    let ws: WebSocket;
    try {
      ws = new WebSocket(offer.url, {
        headers: { 'x-conductor-ticket': offer.ticket },
        handshakeTimeout: CONNECT_TIMEOUT_MS,
      });
    } catch (err) {
      this.log('warn', 'push channel: could not connect; polling', { err: String(err) });
      return;
    }
    this.socket = ws;
    ws.on('open', () => {
      this.upSince = Date.now();
      this.log('info', 'push channel: connected', { url: offer.url });
      this.keepalive = setInterval(() => {
        if (ws.readyState === WebSocket.OPEN) ws.send('{"type":"keepalive"}');
      }, this.keepaliveMs);
      this.keepalive.unref();
    });
    ws.on('message', (data) => {
      let type: unknown;
      try {
        type = (JSON.parse(String(data)) as { type?: unknown }).type;
      } catch {
        return;
      }
      if (type !== 'claimable') return;
      this.hinted = true;
      this.wake?.();
    });
    const down = (why: string) => {
      if (this.socket !== ws) return;
      this.socket = undefined;
      this.upSince = undefined;
      clearInterval(this.keepalive);
      this.log('info', 'push channel: closed; polling until it is offered again', { why });
      // A wait in progress ends: the runner goes back to its backoff.
      this.wake?.();
    };
    ws.on('close', (code) => down(`closed (${code})`));
    ws.on('error', (err) => {
      down(err.message);
      ws.terminate();
    });
  }

  /**
   * Waits up to `ms`, or until a hint arrives (or the socket closes), or
   * `signal` aborts. A hint that came while the runner was claiming is kept,
   * and ends the next wait at once.
   */
  async wait(ms: number, signal: AbortSignal): Promise<'hint' | 'timeout' | 'down'> {
    if (this.hinted) {
      this.hinted = false;
      return 'hint';
    }
    if (!this.up) return 'down';
    return new Promise((done) => {
      const finish = (why: 'hint' | 'timeout' | 'down') => {
        clearTimeout(timer);
        signal.removeEventListener('abort', onAbort);
        this.wake = undefined;
        if (why === 'hint') this.hinted = false;
        done(why);
      };
      const onAbort = () => finish('timeout');
      const timer = setTimeout(() => finish('timeout'), ms);
      signal.addEventListener('abort', onAbort, { once: true });
      this.wake = () => finish(this.hinted ? 'hint' : 'down');
    });
  }

  /** Closes the socket (the runner stops). */
  close(): void {
    const ws = this.socket;
    this.socket = undefined;
    this.upSince = undefined;
    clearInterval(this.keepalive);
    ws?.close();
  }
}
