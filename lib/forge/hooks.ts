// Asking a project's forge to send its webhooks to Conductor, and to stop (for onboarding a
// repository): the forge's module says where and with which events (Forge.hooks); this module
// makes the call and reads the answer as every other forge call is read.
import {
  callForge,
  DEFAULT_TIMEOUT_MS,
  ForgeRefusedError,
  ForgeTransportError,
  ForgeUnavailableError,
  forgeCall,
  transportErrorText,
} from './client.ts';
import type { ForgeKind, HookSpec } from './forge.ts';
import { forgeOf } from './registry.ts';

export interface HookTarget {
  forge: ForgeKind;
  repo: string;
  forgeUrl: string | null;
  githubApiUrl: string;
  /** A token allowed to manage the repository's webhooks. */
  token: string;
}

export type HookResult = { ok: true; id: string } | { ok: false; reason: string };

async function call(
  t: HookTarget,
  what: string,
  build: (api: string) => ReturnType<ReturnType<typeof forgeOf>['hooks']['delete']>,
  timeoutMs: number,
) {
  const forge = forgeOf(t.forge);
  const api = forge.apiBase({ githubApiUrl: t.githubApiUrl, forgeUrl: t.forgeUrl });
  if (api === null)
    return { refused: `the project has no forge_url: the ${forge.title} base URL is needed` };
  try {
    const answer = await callForge(forgeCall(forge, t.token, build(api), { timeoutMs }));
    if (answer.kind === 'rate_limited' || answer.kind === 'retryable') {
      throw new ForgeUnavailableError(
        `${forge.title} answered HTTP ${answer.status} asking to ${what} of ${t.repo}`,
      );
    }
    return { answer, forge };
  } catch (error) {
    if (error instanceof ForgeRefusedError) return { refused: error.message };
    if (error instanceof ForgeTransportError) {
      throw new ForgeUnavailableError(
        `${forge.title} could not be reached asking to ${what} of ${t.repo} (${transportErrorText(error, timeoutMs)})`,
        { cause: error },
      );
    }
    throw error;
  }
}

/** Creates the webhook; answers its id at the forge, or why the forge refused. */
export async function createHook(
  t: HookTarget,
  hook: HookSpec,
  opts: { timeoutMs?: number } = {},
): Promise<HookResult> {
  const forge = forgeOf(t.forge);
  const done = await call(
    t,
    'create a webhook',
    (api) => forge.hooks.create(api, t.repo, hook),
    opts.timeoutMs ?? DEFAULT_TIMEOUT_MS,
  );
  if ('refused' in done) return { ok: false, reason: done.refused ?? 'refused' };
  const { answer } = done;
  if (answer.kind !== 'ok' || answer.body === null) {
    return {
      ok: false,
      reason: `${forge.title} answered HTTP ${answer.status} asking to create a webhook of ${t.repo}`,
    };
  }
  let id: unknown;
  try {
    id = forge.hooks.id(JSON.parse(answer.body.toString('utf8')));
  } catch {
    id = undefined;
  }
  if ((typeof id !== 'number' && typeof id !== 'string') || String(id) === '') {
    return { ok: false, reason: `${forge.title} did not name the webhook it created` };
  }
  return { ok: true, id: String(id) };
}

/** Deletes the webhook `id`; a hook already gone is deleted. */
export async function deleteHook(
  t: HookTarget,
  id: string,
  opts: { timeoutMs?: number } = {},
): Promise<{ ok: true } | { ok: false; reason: string }> {
  const forge = forgeOf(t.forge);
  const done = await call(
    t,
    'delete a webhook',
    (api) => forge.hooks.delete(api, t.repo, id),
    opts.timeoutMs ?? DEFAULT_TIMEOUT_MS,
  );
  if ('refused' in done) return { ok: false, reason: done.refused ?? 'refused' };
  if (done.answer.kind === 'ok' || done.answer.status === 404) return { ok: true };
  return {
    ok: false,
    reason: `${forge.title} answered HTTP ${done.answer.status} asking to delete webhook ${id} of ${t.repo}`,
  };
}
