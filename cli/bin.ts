// The `conductor` command: the package's bin (dist/bin/conductor.mjs, built
// by scripts/build-package.ts).
import { runCli } from './main.ts';
import { promptHidden } from './prompt.ts';

process.exitCode = await runCli(process.argv.slice(2), {
  out: (line) => console.log(line),
  env: process.env,
  stdin: process.stdin,
  // On stderr: stdout may be piped somewhere, and the question is for the person.
  prompt: (question) => promptHidden(question, process.stdin, process.stderr),
});
