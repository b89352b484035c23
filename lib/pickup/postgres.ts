// The channel across server processes on one database: LISTEN on a
// connection of its own (never one of the pool's, which would be held for
// ever), NOTIFY after the commit that made a task claimable.
import pg from 'pg';
import { log } from '../log.ts';
import { type Pickup, type Waiter, Waiters } from './waiters.ts';

/** The channel's name; the payload is empty: a wake-up says only "look again". */
export const PICKUP_CHANNEL = 'conductor_pickup';

export interface PostgresPickupOptions {
  /** The database's postgres:// URL (the pool's). */
  url: string;
  /** The first wait before listening again after the connection was lost; it doubles up to 10 s. */
  reconnectMinMs?: number;
  /** Sends the NOTIFY when the listening connection is down (the pool: one short statement). */
  notifyVia?: (sql: string) => Promise<unknown>;
}

/**
 * LISTEN/NOTIFY pickup. While the listening connection is down, `live` is
 * false (a claim answers at once and the runner polls), every waiting claim
 * is ended, and it connects again with backoff; once listening again, it wakes
 * every claim, since a NOTIFY sent meanwhile reached no one here.
 */
export class PostgresPickup implements Pickup {
  private readonly waiters = new Waiters();
  private client: pg.Client | undefined;
  private listening = false;
  private closed = false;
  private retryMs: number;
  private retryTimer: NodeJS.Timeout | undefined;
  private connecting: Promise<void> | undefined;

  constructor(private readonly options: PostgresPickupOptions) {
    this.retryMs = options.reconnectMinMs ?? 250;
  }

  /** Connects and listens; resolves when listening (or after the first failure, retrying behind). */
  async start(): Promise<void> {
    await this.connect();
  }

  get live(): boolean {
    return this.listening && !this.closed;
  }

  /** The listening connection's backend pid (tests end it to break the channel), or null. */
  get backendPid(): number | null {
    const pid = (this.client as unknown as { processID?: number } | undefined)?.processID;
    return this.listening && typeof pid === 'number' ? pid : null;
  }

  announce(): void {
    if (this.closed) return;
    const sql = `notify ${PICKUP_CHANNEL}`;
    // On the listening connection when it is up (no pool connection taken):
    // PostgreSQL delivers it to every listener, this process's too.
    // While it is down, no claim here waits, and the pool's NOTIFY still
    // reaches the other processes.
    const send =
      this.listening && this.client ? this.client.query(sql) : this.options.notifyVia?.(sql);
    send?.catch((err: unknown) => log('warn', 'pickup: a NOTIFY was not sent', { err }));
  }

  subscribe(): Waiter {
    return this.waiters.subscribe(() => this.live);
  }

  async close(): Promise<void> {
    this.closed = true;
    clearTimeout(this.retryTimer);
    await this.connecting;
    this.listening = false;
    this.waiters.wake('down');
    const client = this.client;
    this.client = undefined;
    await client?.end().catch(() => {});
  }

  private connect(): Promise<void> {
    this.connecting ??= this.listen().finally(() => {
      this.connecting = undefined;
    });
    return this.connecting;
  }

  private async listen(): Promise<void> {
    if (this.closed) return;
    const client = new pg.Client({
      connectionString: this.options.url,
      application_name: 'conductor-pickup',
      // A listening session is idle by design: the pool's idle_session_timeout
      // must not end it. TCP keepalive finds a peer that vanished.
      options: '-c idle_session_timeout=0',
      keepAlive: true,
      keepAliveInitialDelayMillis: 10_000,
      connectionTimeoutMillis: 10_000,
    });
    let lost = false;
    const onLost = (err?: unknown) => {
      if (lost) return;
      lost = true;
      if (this.client === client) this.client = undefined;
      const was = this.listening;
      this.listening = false;
      if (this.closed) return;
      if (was)
        log('warn', 'pickup: the listening connection was lost; runners poll meanwhile', { err });
      this.waiters.wake('down');
      client.end().catch(() => {});
      this.retry();
    };
    client.on('error', onLost);
    client.on('end', () => onLost());
    client.on('notification', () => this.waiters.wake('woken'));
    try {
      await client.connect();
      await client.query(`listen ${PICKUP_CHANNEL}`);
    } catch (err) {
      onLost(err);
      return;
    }
    if (this.closed) {
      await client.end().catch(() => {});
      return;
    }
    this.client = client;
    this.listening = true;
    this.retryMs = this.options.reconnectMinMs ?? 250;
    // A NOTIFY sent while nobody here listened is lost: every claim looks again.
    this.waiters.wake('woken');
  }

  private retry(): void {
    clearTimeout(this.retryTimer);
    const wait = this.retryMs;
    this.retryMs = Math.min(10_000, this.retryMs * 2);
    this.retryTimer = setTimeout(() => void this.connect(), wait);
    this.retryTimer.unref();
  }
}
