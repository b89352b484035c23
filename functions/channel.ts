// The push channel's WebSocket routes (API Gateway WebSocket API, issue #52):
// $connect checks the runner's ticket and records the connection, $disconnect
// forgets it, $default answers the runner's keepalive. None of them opens a
// database connection (lib/app/channel.ts).
import { channelConnect, channelDisconnect } from '../lib/app/channel.ts';
import { getContext } from '../lib/context.ts';
import { log } from '../lib/log.ts';

/** What API Gateway hands a WebSocket route's function (the fields used here). */
export interface WebSocketEvent {
  requestContext: { routeKey: string; connectionId: string };
  queryStringParameters?: Record<string, string | undefined> | null;
  headers?: Record<string, string | undefined> | null;
  body?: string | null;
}

/** $connect, $disconnect and $default. */
export async function handler(
  event: WebSocketEvent,
): Promise<{ statusCode: number; body?: string }> {
  const { routeKey, connectionId } = event.requestContext;
  const ctx = await getContext();
  try {
    if (routeKey === '$connect') {
      // The ticket in a header (the runner's client sends one) or the query.
      const ticket =
        event.headers?.['x-conductor-ticket'] ??
        event.headers?.['X-Conductor-Ticket'] ??
        event.queryStringParameters?.ticket ??
        undefined;
      const { status } = await channelConnect(ctx, connectionId, ticket);
      return { statusCode: status };
    }
    if (routeKey === '$disconnect') {
      await channelDisconnect(ctx, connectionId);
      return { statusCode: 200 };
    }
    // $default: the runner's keepalive (API Gateway answers no protocol ping).
    return { statusCode: 200 };
  } catch (err) {
    log('error', 'channel: a route failed', { err, route: routeKey });
    return { statusCode: 500 };
  }
}
