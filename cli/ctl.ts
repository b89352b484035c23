// `npm run ctl -- <command>`: the `conductor` CLI run from this
// checkout, for people who work on Conductor itself. Hints it prints name
// `npm run ctl --` instead of `conductor`.
import { type Command, Help } from 'commander';
import type { CliIo } from './context.ts';
import { buildProgram, runCli } from './main.ts';

export type CtlIo = CliIo;

/** Runs one CLI command as `npm run ctl --`; answers the process exit code. */
export function runCtl(argv: string[], io: CtlIo): Promise<number> {
  return runCli(argv, { name: 'npm run ctl --', ...io });
}

/** Every command with its arguments and options, one a line (docs are checked against it). */
export function usageOf(name: string): string {
  const program = buildProgram({ out: () => {}, env: {}, name });
  const help = new Help();
  const lines = [`usage: ${name} <command> [options]`, ''];
  const walk = (cmd: Command, words: string[]) => {
    for (const sub of cmd.commands) {
      const path = [...words, sub.name()];
      if (sub.commands.length === 0 || sub.registeredArguments.length > 0) {
        const args = sub.registeredArguments.map((a) => (a.required ? a.name() : `[${a.name()}]`));
        lines.push(`  ${[...path, ...args].join(' ')}    ${sub.description()}`);
        for (const option of help.visibleOptions(sub)) {
          if (option.long === '--help') continue;
          lines.push(`      ${option.flags}    ${option.description}`);
        }
      }
      walk(sub, path);
    }
  };
  walk(program, []);
  lines.push('', 'every command:');
  for (const option of help.visibleOptions(program))
    lines.push(`      ${option.flags}    ${option.description}`);
  return lines.join('\n');
}

/** The whole usage of `npm run ctl --`. */
export const USAGE = usageOf('npm run ctl --');

export { promptHidden } from './prompt.ts';
