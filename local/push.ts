// A signed push webhook, shaped like the forge's own, for the CLI and the demo.
import { randomUUID } from 'node:crypto';
import { type ForgeKind, signBody, webhookHeaders } from '../lib/forge/webhook.ts';

export interface Push {
  /** The control plane's base URL. */
  url: string;
  forge: ForgeKind;
  /** owner/name, as the project has it. */
  repo: string;
  repoUrl: string;
  sha: string;
  ref: string;
  /** The commit the ref was at before the push; default none (a new branch's zeros). */
  before?: string;
  /** The project's webhook secret. */
  secret: string;
  message?: string;
  fetch?: typeof fetch;
}

/** Sends a push webhook signed with the project's secret; answers the status and the body text. */
export async function sendPush(push: Push): Promise<{ status: number; text: string }> {
  const raw = Buffer.from(
    JSON.stringify({
      ref: push.ref,
      before: push.before ?? '0'.repeat(push.sha.length),
      after: push.sha,
      created: false,
      deleted: false,
      forced: false,
      repository: {
        full_name: push.repo,
        name: push.repo.split('/')[1],
        clone_url: push.repoUrl,
      },
      head_commit: { id: push.sha, message: push.message ?? 'a push' },
      pusher: { name: 'conductor' },
    }),
  );
  const names = webhookHeaders(push.forge);
  const res = await (push.fetch ?? fetch)(
    `${push.url.replace(/\/$/, '')}/v1/webhooks/${push.forge}`,
    {
      method: 'POST',
      headers: {
        'content-type': 'application/json',
        [names.event]: 'push',
        [names.delivery]: randomUUID(),
        [names.signature]: signBody(push.forge, raw, push.secret),
      },
      body: raw,
    },
  );
  return { status: res.status, text: await res.text() };
}
