// Compiling a job: read .conductor.yml at the job's commit from the forge (or a
// local repository), compile it, and start the job with its tasks or fail it
// with every error. No transaction is open while the forge is asked.
import type { Pool } from './db/index.ts';
import { ForgeUnavailableError, fetchPipelineFile } from './forge/pipeline-file.ts';
import { log } from './log.ts';
import { compilePipeline, formatIssue, PipelineError } from './pipeline/index.ts';
import { forgeToken, getProjectRow } from './projects.ts';
import {
  countCompileAttempt,
  failJob,
  getJob,
  noteCompileError,
  startJob,
} from './scheduler/index.ts';
import type { Keyring } from './secrets.ts';

export type CompileOutcome = 'started' | 'failed' | 'not_pending' | 'forge_unavailable';

/** Compiles a pending job; safe to run twice for the same job (the second finds it started). */
export async function compileJob(
  pool: Pool,
  keyring: Keyring,
  githubApiUrl: string,
  jobId: string,
): Promise<CompileOutcome> {
  const job = await getJob(pool, jobId);
  if (!job || job.state !== 'pending') return 'not_pending';
  const project = await getProjectRow(pool, job.project_id);
  if (!project) return 'not_pending';
  // Counted here, as the compile starts, not where it was dispatched: the
  // sweep fails a job left pending after its last counted attempt.
  if ((await countCompileAttempt(pool, jobId)) === null) return 'not_pending';

  let text: string;
  try {
    const file = await fetchPipelineFile({
      forge: project.forge,
      repo: project.repo,
      repoUrl: project.repo_url,
      forgeUrl: project.forge_url,
      githubApiUrl,
      // The control plane reads the file with the project's token even for a
      // fork's pull request: the token never reaches that job's runner.
      token: forgeToken(keyring, project),
      sha: job.sha,
    });
    if (!file.found) {
      await failJob(pool, jobId, file.reason);
      return 'failed';
    }
    text = file.text;
  } catch (err) {
    if (err instanceof ForgeUnavailableError) {
      // Left pending: the sweep dispatches the compile again, and fails the
      // job with this reason after its last attempt.
      await noteCompileError(pool, jobId, err.message);
      log('warn', 'the forge is unavailable; the compile will be retried', { job_id: jobId, err });
      return 'forge_unavailable';
    }
    throw err;
  }

  let compiled: ReturnType<typeof compilePipeline>;
  try {
    compiled = compilePipeline(text, {
      ref: job.ref,
      event: job.trigger,
      baseRef: job.base_ref,
    });
  } catch (err) {
    if (err instanceof PipelineError) {
      await failJob(pool, jobId, err.issues.map((i) => formatIssue(i)).join('\n'), err.issues);
      return 'failed';
    }
    throw err;
  }
  const started = await startJob(pool, jobId, compiled);
  return started.started ? 'started' : 'not_pending';
}
