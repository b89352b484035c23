// Deciding `changes:` filters for a job as it compiles: which diff the job
// has (a push's before..after, a pull request's base...head, the merge base
// with the default branch for a new or force-pushed branch, nothing for a tag,
// a schedule or a manual run), the files in it (the push payload's lists when
// complete, else the forge's compare API, else git for a repository on this
// machine), and which tasks no changed file concerns. Called by the compile
// outside any transaction; nothing is asked of the forge when no task has a
// filter. An unknown diff runs every task, and the job says why.
import { resolveHead } from '../forge/branch.ts';
import { type CompareResult, type CompareSource, changedFiles } from '../forge/compare.ts';
import { isLocalRepo } from '../forge/pipeline-file.ts';
import {
  CHANGES_MATCH_STEPS,
  type CompiledTask,
  changesMatch,
  changesSkipReason,
  describeChanges,
  MatchBudget,
  MatchBudgetError,
} from '../pipeline/index.ts';
import type { JobRow } from '../scheduler/index.ts';

/** Most changed files a job keeps to show; the rest are counted. */
export const SHOWN_CHANGED_FILES = 100;

/** What the decision was made from, as the job stores and shows it. */
export interface DiffInfo {
  /** `before..after`, `base...head`; null when the diff is unknown. */
  base: string | null;
  /** The first SHOWN_CHANGED_FILES changed files. */
  files: string[] | null;
  count: number | null;
  /** Why the diff is unknown, or where the list came from. */
  note: string;
}

/** The compiled tasks with those left out by `changes:` marked, and the diff they were decided on. */
export interface ChangesDecision {
  tasks: Array<CompiledTask & { pathSkipped?: string }>;
  diff: DiffInfo | null;
}

const short = (sha: string) => sha.slice(0, 12);

type Plan =
  | { unknown: string }
  | { base: string; head: string; label: string; payload: string[] | null; mergeBase?: boolean };

/** The diff a job has, by its trigger (see the header). `defaultHead` is asked for only when needed. */
async function planDiff(
  job: JobRow,
  defaultHead: () => Promise<{ ref: string; sha: string } | { reason: string }>,
): Promise<Plan> {
  switch (job.trigger) {
    case 'pull_request': {
      if (!job.base_ref) return { unknown: 'the pull request did not name its base branch' };
      const base = job.base_ref.replace(/^refs\/heads\//, '');
      return { base, head: job.sha, label: `${base}...${short(job.sha)}`, payload: null };
    }
    case 'push': {
      if (job.push_created || job.push_forced || job.push_before === null) {
        const why = job.push_created
          ? 'a new branch'
          : job.push_forced
            ? 'a force push'
            : 'a push that did not say the commit before it';
        const head = await defaultHead();
        if ('reason' in head) return { unknown: `${why}, and ${head.reason}` };
        if (head.ref === job.ref) {
          return { unknown: `${why} of the default branch has nothing to compare with` };
        }
        const name = head.ref.replace(/^refs\/heads\//, '');
        return {
          base: head.sha,
          head: job.sha,
          label: `${name}...${short(job.sha)} (${why}: its merge base with ${name})`,
          payload: null,
          mergeBase: true,
        };
      }
      return {
        base: job.push_before,
        head: job.sha,
        label: `${short(job.push_before)}..${short(job.sha)}`,
        payload: job.payload_files,
      };
    }
    case 'tag':
      return { unknown: 'a tag has no diff to compare' };
    case 'rerun':
      // A rerun of a compiled job copies its tasks and their decision
      // (lib/scheduler/rerun.ts); only one whose first job never compiled
      // compiles, and then there is no push of its own to compare.
      return { unknown: 'a rerun of a job that never compiled has no diff of its own' };
    default:
      return { unknown: `a ${job.trigger} run has no diff to compare` };
  }
}

/**
 * Decides the `changes:` filters of a compiled job. Throws
 * ForgeUnavailableError when the forge may answer later (the compile is
 * retried); any answer that will not change makes the diff unknown.
 */
export async function decideChanges(
  job: JobRow,
  src: CompareSource,
  tasks: CompiledTask[],
): Promise<ChangesDecision> {
  if (!tasks.some((task) => task.changes)) return { tasks, diff: null };
  const plan = await planDiff(job, async () => {
    const head = await resolveHead(src, null);
    return head.found ? head : { reason: `the default branch is unknown (${head.reason})` };
  });
  if ('unknown' in plan) {
    return { tasks, diff: { base: null, files: null, count: null, note: plan.unknown } };
  }
  let result: CompareResult;
  let source: string;
  if (plan.payload !== null) {
    result = { known: true, files: plan.payload };
    source = 'from the push payload';
  } else {
    result = await changedFiles(src, plan.base, plan.head);
    source = isLocalRepo(src.repoUrl) ? 'from git' : "from the forge's compare API";
  }
  if (!result.known) {
    return { tasks, diff: { base: null, files: null, count: null, note: result.reason } };
  }
  const files = result.files;
  // One budget for the whole job (pathglob.ts): a pipeline file of hostile
  // patterns and a push of long names end here in bounded time, running
  // every task as an unknown diff would. A matrix's expansions share their
  // filter, so each distinct filter is matched once.
  const budget = new MatchBudget(CHANGES_MATCH_STEPS);
  const answers = new Map<string, boolean>();
  let decided: ChangesDecision['tasks'];
  try {
    decided = tasks.map((task) => {
      if (!task.changes) return task;
      const key = describeChanges(task.changes);
      let runs = answers.get(key);
      if (runs === undefined) {
        runs = changesMatch(task.changes, files, budget);
        answers.set(key, runs);
      }
      return runs ? task : { ...task, pathSkipped: changesSkipReason(task.changes) };
    });
  } catch (error) {
    if (!(error instanceof MatchBudgetError)) throw error;
    const note = `matching the changes: patterns against ${files.length} changed files took more than ${CHANGES_MATCH_STEPS} steps, so every task runs`;
    return { tasks, diff: { base: null, files: null, count: null, note } };
  }
  return {
    tasks: decided,
    diff: {
      base: plan.label,
      files: files.slice(0, SHOWN_CHANGED_FILES),
      count: files.length,
      note: source,
    },
  };
}
