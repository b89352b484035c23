// One JSON question to a forge, read the same way for every operation that asks one (a branch's
// head, the default branch, a page of a comparison): a refusal that no retry changes is a
// reason, what may pass is a ForgeUnavailableError.
import {
  callForge,
  type ForgeAnswer,
  ForgeRefusedError,
  ForgeTransportError,
  ForgeUnavailableError,
  forgeCall,
  transportErrorText,
} from './client.ts';
import type { Forge, ForgeRequest } from './forge.ts';

export interface Asker {
  forge: Forge;
  token: string | null;
  repo: string;
  timeoutMs: number;
  /** Default 1 MiB. */
  maxBytes?: number;
}

export type JsonAnswer =
  | { ok: true; body: unknown; link: string | null }
  | { ok: false; reason: string };

/**
 * Asks `req` and parses the JSON answer. `what` names the question in messages (`branch main
 * of o/r`). With `notFound`, a 404 is that reason; with `accessHint`, a 401 or 403 says to check
 * the project's forge token.
 */
export async function askJson(
  a: Asker,
  req: ForgeRequest,
  what: string,
  opts: { notFound?: string; accessHint?: boolean } = { accessHint: true },
): Promise<JsonAnswer> {
  const name = a.forge.title;
  let answer: ForgeAnswer;
  try {
    answer = await callForge(
      forgeCall(a.forge, a.token, req, {
        timeoutMs: a.timeoutMs,
        ...(a.maxBytes === undefined ? {} : { maxBytes: a.maxBytes }),
      }),
    );
  } catch (error) {
    // An address the control plane may not call, or a redirect: the project's URL is wrong.
    if (error instanceof ForgeRefusedError) return { ok: false, reason: error.message };
    if (error instanceof ForgeTransportError) {
      throw new ForgeUnavailableError(
        `${name} could not be reached asking for ${what} (${transportErrorText(error, a.timeoutMs)})`,
        { cause: error },
      );
    }
    throw error;
  }
  if (answer.kind === 'ok') {
    if (answer.body === null) {
      if (a.maxBytes !== undefined) {
        return { ok: false, reason: `${name}'s answer from ${what} was too large` };
      }
    } else {
      try {
        return {
          ok: true,
          body: JSON.parse(answer.body.toString('utf8')),
          link: answer.headers.get('link'),
        };
      } catch {
        return { ok: false, reason: `${name} answered ${what} with something not JSON` };
      }
    }
  }
  if (answer.status === 404 && opts.notFound) return { ok: false, reason: opts.notFound };
  if (answer.kind === 'rate_limited' || answer.kind === 'retryable') {
    throw new ForgeUnavailableError(`${name} answered HTTP ${answer.status} asking for ${what}`);
  }
  if (opts.accessHint && (answer.status === 401 || answer.status === 403)) {
    return {
      ok: false,
      reason: `the forge refused access to ${a.repo} (HTTP ${answer.status}): check the project's forge token`,
    };
  }
  return { ok: false, reason: `${name} answered HTTP ${answer.status} asking for ${what}` };
}
