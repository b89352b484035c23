// The pipeline file, checked where people write it, with no server:
// `validate [FILE]` compiles it with the server's compiler; `schema` prints
// the JSON Schema editors check it with.
import { execFileSync } from 'node:child_process';
import { readFile } from 'node:fs/promises';
import { dirname, isAbsolute, join, relative, resolve } from 'node:path';
import type { Command } from 'commander';
import { formatIssue, planPipeline } from '../lib/app/plan.ts';
import type { CompiledTask } from '../lib/pipeline/compile.ts';
import { pipelineJsonSchema } from '../lib/pipeline/json-schema.ts';
import { Cli, CliError, type CliIo } from './context.ts';

/** The ref a validate without --ref checks for: the current branch, or main, saying which. */
function currentRef(dir: string): { ref: string; why: string } {
  try {
    const branch = execFileSync('git', ['-C', dir, 'symbolic-ref', '--short', '-q', 'HEAD'], {
      stdio: ['ignore', 'pipe', 'ignore'],
      timeout: 10_000,
    })
      .toString()
      .trim();
    if (branch) return { ref: `refs/heads/${branch}`, why: 'the current branch' };
  } catch {
    // Not a repository, or a detached HEAD: assumed, and said so.
  }
  return { ref: 'refs/heads/main', why: 'assumed: no current branch here; give --ref' };
}

/** What a task will do, in a few words each: the summary's notes. */
export function taskNotes(task: CompiledTask): string[] {
  const block = task.block;
  const storage = task.storage ?? {};
  const duration = (s: number) =>
    s % 3600 === 0 ? `${s / 3600}h` : s % 60 === 0 ? `${s / 60}m` : `${s}s`;
  return [
    block
      ? `block step "${block.prompt}"${block.fields.length ? ` (fields ${block.fields.map((f) => f.name).join(', ')})` : ''}, waits ${duration(block.timeoutS)} then ${block.onTimeout === 'skip' ? 'skips' : 'fails'}`
      : '',
    task.needs.length > 0 ? `needs ${task.needs.join(', ')}` : '',
    task.when && task.when !== 'on_success' ? `when ${task.when}` : '',
    task.allowFailure ? 'allowed to fail' : '',
    task.failFast && Object.keys(task.matrix).length > 0 ? 'fail fast' : '',
    task.changes
      ? `only when ${task.changes.include.join(', ')} change${task.changes.exclude.length ? ` (not ${task.changes.exclude.join(', ')})` : ''}`
      : '',
    task.concurrency
      ? `concurrency ${task.concurrency.group}${task.concurrency.limit > 1 ? ` (${task.concurrency.limit} at a time)` : ''}${task.concurrency.mode !== 'queue' ? ` ${task.concurrency.mode}` : ''}`
      : '',
    task.services?.length ? `services ${task.services.map((s) => s.name).join(', ')}` : '',
    task.secrets.length > 0 ? `secrets ${task.secrets.join(', ')}` : '',
    storage.caches?.length ? `cache ${storage.caches.map((c) => c.key).join(', ')}` : '',
    storage.artifacts ? `artifacts ${storage.artifacts.paths.join(', ')}` : '',
    // A block step holds no runner: labels mean nothing for it.
    !block && task.labels.length > 0 ? `labels ${task.labels.join(', ')}` : '',
  ].filter(Boolean);
}

/**
 * `validate [FILE] [--ref REF]`: compiles the file as the server would for a
 * push of REF, with no server. Included files are read from the working tree,
 * their paths taken from the pipeline file's folder (the repository's root,
 * where the server finds .conductor.yml).
 */
async function validate(cli: Cli, shown: string, given: string | undefined): Promise<void> {
  const { io, cwd } = cli;
  const file = resolve(cwd, shown);
  let text: string;
  try {
    text = await readFile(file, 'utf8');
  } catch (err) {
    const code = (err as NodeJS.ErrnoException).code;
    throw new CliError(
      code === 'ENOENT'
        ? `no pipeline file at ${shown}`
        : `cannot read ${shown}: ${(err as Error).message}`,
      2,
    );
  }
  const root = dirname(file);
  const { ref, why } = given
    ? { ref: given.startsWith('refs/') ? given : `refs/heads/${given}`, why: '' }
    : currentRef(root);
  const event = ref.startsWith('refs/tags/') ? 'tag' : 'push';
  const plan = await planPipeline(text, { ref, event }, async (path) => {
    try {
      return { text: await readFile(join(root, path), 'utf8') };
    } catch (err) {
      const code = (err as NodeJS.ErrnoException).code;
      return {
        error:
          code === 'ENOENT'
            ? `${JSON.stringify(path)} does not exist in the working tree`
            : `${JSON.stringify(path)} cannot be read: ${(err as Error).message}`,
      };
    }
  });
  if ('issues' in plan) {
    // An included file's problems name it from the repository root; from
    // here, so that an editor opens it from these lines.
    const rel = isAbsolute(shown) ? root : relative(cwd, root);
    const issues = plan.issues.map((issue) =>
      issue.file === undefined ? issue : { ...issue, file: join(rel, issue.file) },
    );
    cli.print({ valid: false, file: shown, issues }, () => {
      for (const issue of issues) io.out(formatIssue(issue, shown));
      const n = issues.length;
      io.out(
        `${shown}: ${n} problem${n === 1 ? '' : 's'}; a job would fail with ${n === 1 ? 'it' : 'them'}`,
      );
    });
    throw new CliError('', 1);
  }
  const { tasks, name } = plan.pipeline;
  cli.print(
    {
      valid: true,
      file: shown,
      ref,
      name,
      tasks,
      left_out: plan.leftOut,
    },
    () => {
      const n = tasks.length;
      io.out(
        `${shown}: valid${name ? ` (${name})` : ''}; a push of ${ref}${why ? ` (${why})` : ''} runs ${n} task${n === 1 ? '' : 's'}${n ? ':' : ''}`,
      );
      const width = Math.min(48, Math.max(0, ...tasks.map((t) => t.name.length)));
      for (const task of tasks) {
        const notes = taskNotes(task);
        io.out(
          `  ${task.name.padEnd(width)}${notes.length ? `  ${notes.join(' · ')}` : ''}`.trimEnd(),
        );
      }
      if (plan.leftOut.length > 0) {
        io.out(`left out for ${ref}:`);
        const w = Math.min(48, Math.max(...plan.leftOut.map((t) => t.name.length)));
        for (const task of plan.leftOut) io.out(`  ${task.name.padEnd(w)}  ${task.reason}`);
      }
    },
  );
}

/** `validate`, `schema`. */
export function registerPipeline(program: Command, io: CliIo): void {
  program
    .command('validate')
    .description(
      "check a pipeline file with the server's compiler, no server needed: its problems, or the tasks a job for REF runs (exit 0 valid, 1 invalid)",
    )
    .argument('[FILE]', 'the pipeline file', '.conductor.yml')
    .option('--ref <REF>', 'the branch or ref to plan for (default: the current branch)')
    .action(async (file: string, o, cmd: Command) => {
      await validate(new Cli(io, cmd), file, o.ref);
    });
  program
    .command('schema')
    .description(
      'print the JSON Schema of .conductor.yml, for editors (docs/pipeline.md, "In your editor")',
    )
    .action(() => {
      io.out(JSON.stringify(pipelineJsonSchema(), null, 2));
    });
}
