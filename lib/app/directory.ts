// The webhook directory (lib/idle/intake.ts) follows a project's secret: a
// closed gate refuses a delivery whose signature the directory's entry does
// not verify, so a rotation must rewrite the entry before the new secret is
// handed out.
import type { AppContext } from '../context.ts';
import { UnavailableError } from '../errors.ts';
import { gateDirectory } from '../idle/intake.ts';
import { getProjectRow } from './projects.ts';

/** Rewrites the project's directory entry from its row; a 503 when the bucket refuses. */
export async function refreshDirectoryEntry(ctx: AppContext, projectId: string): Promise<void> {
  if (!ctx.gate) return;
  const project = await getProjectRow(ctx.pool, projectId);
  if (!project) return;
  try {
    await gateDirectory(ctx.gate).put(project.forge, {
      projectId: project.id,
      repo: project.repo,
      secretEnc: project.webhook_secret_enc,
    });
  } catch (err) {
    throw new UnavailableError(
      `the webhook secret of project "${projectId}" was replaced, but the idle gate's webhook directory could not be told: deliveries signed with the new secret would be refused; replace it again`,
      { cause: err },
    );
  }
}
