// Behind a reverse proxy: which peers' X-Forwarded-For/-Proto/-Host the local
// server believes (CONDUCTOR_TRUSTED_PROXIES). A header from any other peer
// is dropped before a function sees it: anyone can send one, and a believed
// `X-Forwarded-Proto: http` or `Host` would change links, cookies and the
// client address in the log.
import { BlockList, isIP } from 'node:net';

/** The request as the functions see it once the forwarded headers are weighed. */
export interface Forwarded {
  /** The client's address: the peer's, or, through trusted proxies, the first untrusted hop. */
  client: string;
  /** `X-Forwarded-Proto` of a trusted proxy, else none. */
  proto?: string;
  /** `X-Forwarded-Host` of a trusted proxy, else none (the Host header stands). */
  host?: string;
}

/** The forwarded headers this module reads, and drops from an untrusted peer. */
export const FORWARDED_HEADERS = [
  'forwarded',
  'x-forwarded-for',
  'x-forwarded-proto',
  'x-forwarded-host',
  'x-forwarded-port',
  'x-real-ip',
] as const;

/** `::ffff:10.0.0.1` (an IPv4 peer on a dual-stack socket) as `10.0.0.1`. */
export function plainAddress(address: string): string {
  const mapped = /^::ffff:(\d+\.\d+\.\d+\.\d+)$/i.exec(address);
  return mapped ? mapped[1]! : address;
}

/** The trusted proxies (addresses and CIDR ranges, as config.ts checked them). */
export class TrustedProxies {
  private readonly list = new BlockList();
  readonly size: number;

  constructor(entries: readonly string[] = []) {
    for (const entry of entries) {
      const [address = '', bits] = entry.split('/');
      const family = isIP(address) === 6 ? 'ipv6' : 'ipv4';
      if (bits === undefined) this.list.addAddress(address, family);
      else this.list.addSubnet(address, Number(bits), family);
    }
    this.size = entries.length;
  }

  /** Whether `address` (a socket's remote address) is one of them. */
  trusts(address: string | undefined): boolean {
    if (!address || this.size === 0) return false;
    const plain = plainAddress(address);
    const family = isIP(plain);
    if (family === 0) return false;
    return this.list.check(plain, family === 6 ? 'ipv6' : 'ipv4');
  }

  /**
   * Weighs a request's forwarded headers. From a trusted peer, the client is
   * the rightmost X-Forwarded-For hop that is not itself trusted (each proxy
   * appends the address it saw, so the hops left of an untrusted one are
   * whatever the client wrote), and the proto and host are the first value
   * of theirs; from any other peer, only the socket counts.
   */
  weigh(peer: string | undefined, headers: Record<string, string>): Forwarded {
    const socket = plainAddress(peer ?? '');
    if (!this.trusts(socket)) return { client: socket };
    const hops = (headers['x-forwarded-for'] ?? '')
      .split(',')
      .map((s) => plainAddress(s.trim()))
      .filter((s) => isIP(s) !== 0);
    let client = socket;
    for (let i = hops.length - 1; i >= 0; i--) {
      client = hops[i]!;
      if (!this.trusts(client)) break;
    }
    const first = (name: string) => headers[name]?.split(',')[0]?.trim() || undefined;
    const proto = first('x-forwarded-proto')?.toLowerCase();
    return {
      client,
      ...(proto === 'http' || proto === 'https' ? { proto } : {}),
      ...(first('x-forwarded-host') ? { host: first('x-forwarded-host') } : {}),
    };
  }
}
