// A webhook delivery, whatever the forge: its headers read by the forge's names (and aliases),
// its signature checked and its payload read by the forge's module (lib/forge/<name>/).
import { BadRequestError } from '../errors.ts';
import type { ForgeKind, HeaderNames, PushDiff, WebhookIntent } from './forge.ts';
import { forgeOf } from './registry.ts';

export type { ForgeKind, PushDiff, WebhookIntent } from './forge.ts';
export {
  isBotAccount,
  isCommitSha,
  PAYLOAD_COMMITS_CAP,
  PAYLOAD_FILES_CAP,
} from './payload.ts';

/** Header names a forge sends; the signature header is the one the contract verifies. */
export function webhookHeaders(forge: ForgeKind): HeaderNames {
  return forgeOf(forge).webhook.headers;
}

// Forges send UUIDs (36 characters); the cap only keeps a junk header out of the database.
const MAX_DELIVERY_LENGTH = 200;

export interface WebhookHeaders {
  event: string;
  delivery: string;
  signature: string | undefined;
}

/**
 * Reads event, delivery id and signature headers (case-insensitive names; the forge's own names
 * first, then its aliases: Forgejo's on Gitea); a missing event or delivery header is a
 * BadRequestError naming the header.
 */
export function readWebhookHeaders(
  forge: ForgeKind,
  headers: Record<string, string | undefined>,
): WebhookHeaders {
  const byName = new Map<string, string>();
  for (const [name, value] of Object.entries(headers)) {
    // An empty value counts as absent: Gitea sends an empty signature header when no secret is set.
    const trimmed = value?.trim();
    if (trimmed) byName.set(name.toLowerCase(), trimmed);
  }
  const { webhook } = forgeOf(forge);
  const dialects: readonly HeaderNames[] = [webhook.headers, ...webhook.aliases];
  // Per header, the forge's own name first, then the aliases.
  const read = (field: keyof HeaderNames) => {
    for (const names of dialects) {
      const value = byName.get(names[field].toLowerCase());
      if (value !== undefined) return { name: names[field], value };
    }
    return undefined;
  };
  const missing = (field: keyof HeaderNames) => {
    const own = webhook.headers[field];
    const others = [...new Set(dialects.map((names) => names[field]))].filter((n) => n !== own);
    const also = others.length > 0 ? ` (or ${others.join(', ')})` : '';
    return new BadRequestError(`missing ${own} header${also}`);
  };
  const event = read('event');
  if (event === undefined) throw missing('event');
  const delivery = read('delivery');
  if (delivery === undefined) throw missing('delivery');
  if (delivery.value.length > MAX_DELIVERY_LENGTH) {
    throw new BadRequestError(
      `${delivery.name} header is ${delivery.value.length} characters; at most ${MAX_DELIVERY_LENGTH} are allowed`,
    );
  }
  return { event: event.value, delivery: delivery.value, signature: read('signature')?.value };
}

/**
 * Reads a parsed JSON payload leniently (unknown fields ignored) in the forge's dialect. A field
 * the event needs that is missing or of the wrong type is a ValidationError whose issue path
 * names the field, e.g. `pull_request.head.sha`.
 */
export function parseWebhook(forge: ForgeKind, event: string, payload: unknown): WebhookIntent {
  return forgeOf(forge).webhook.parse(event, payload);
}

/**
 * A push's before, forced, created and the files its commits list (see PushDiff), for the
 * `changes:` filters; read from the payload a push intent came from. Never fails: what is
 * missing is unknown.
 */
export function readPushDiff(forge: ForgeKind, payload: unknown): PushDiff {
  return forgeOf(forge).webhook.pushDiff(payload);
}

/** The repository's default branch a payload names, or undefined when it does not say. */
export function defaultBranchOf(forge: ForgeKind, payload: unknown): string | undefined {
  return forgeOf(forge).webhook.defaultBranch(payload);
}

/**
 * Why a webhook body is not JSON, and what to change at the forge when its setting is the cause.
 * GitHub and Gitea offer a second content type, `application/x-www-form-urlencoded`, which sends
 * the JSON as a `payload=` form field; the signature would still check, so the only fix is the
 * webhook's setting.
 */
export function notJsonMessage(
  forge: ForgeKind,
  headers: Record<string, string | undefined>,
  body: Buffer,
): string {
  const type = Object.entries(headers).find(([name]) => name.toLowerCase() === 'content-type')?.[1];
  const form =
    /^\s*application\/x-www-form-urlencoded/i.test(type ?? '') ||
    body.subarray(0, 8).toString('latin1') === 'payload=';
  const setting = forgeOf(forge).webhook.contentTypeSetting;
  const fix = `set the webhook's ${setting} to application/json (the repository's Settings, Webhooks)`;
  if (form) return `the body is form-encoded (application/x-www-form-urlencoded), not JSON: ${fix}`;
  // Sent as JSON and still broken: the forge's setting is not the cause.
  if (type === undefined || /\bjson\b/i.test(type)) return 'the body is not valid JSON';
  return `the body is not valid JSON (content type ${JSON.stringify(type.slice(0, 100))}): ${fix}`;
}

/** Constant-time check of the signature header over the raw body bytes with the project's secret. */
export function verifySignature(
  forge: ForgeKind,
  rawBody: Buffer,
  secret: string,
  header: string | undefined,
): boolean {
  return forgeOf(forge).webhook.verify(rawBody, secret, header);
}

/** Computes the header value a forge would send (for tests, the demo and the CLI). */
export function signBody(forge: ForgeKind, rawBody: Buffer, secret: string): string {
  return forgeOf(forge).webhook.sign(rawBody, secret);
}
