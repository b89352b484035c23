// Commit statuses are written to an outbox in the same transaction as the job
// state change they report, so a status is never lost and never posted for a
// change that rolled back. lib/app/statuses.ts delivers them after the commit.
import type { Queryable } from '../db/index.ts';
import type { StatusState } from '../states.ts';

/** The status of a job held for approval: `pending` on the forge, with this description. */
export const WAITING_FOR_APPROVAL = 'waiting for approval';

/** The forge limits a status description to 140 characters. */
export function shortDescription(text: string): string {
  const line = text.replace(/\s+/g, ' ').trim();
  return line.length <= 140 ? line : `${line.slice(0, 139)}…`;
}

/**
 * Records a status to post for a job. Nothing is recorded for a project
 * without a forge token or with a local repository: there is no forge to tell.
 * `delayS` holds a row back so a quick follow-up can supersede it.
 */
export async function enqueueStatus(
  tx: Queryable,
  jobId: string,
  state: StatusState,
  description: string,
  delayS = 0,
): Promise<void> {
  await tx.query(
    `insert into status_outbox (job_id, state, description, next_attempt_at)
     select j.id, $2, $3, now() + make_interval(secs => $4)
       from jobs j join projects p on p.id = j.project_id
      where j.id = $1 and p.forge_token_enc is not null and p.repo_url ~ '^https?://'`,
    [jobId, state, shortDescription(description), delayS],
  );
}
