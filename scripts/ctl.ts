// npm run ctl -- <command>: the `conductor` CLI from this checkout.

import { runCtl } from '../cli/ctl.ts';
import { promptHidden } from '../cli/prompt.ts';

process.exitCode = await runCtl(process.argv.slice(2), {
  out: (line) => console.log(line),
  env: process.env,
  stdin: process.stdin,
  // On stderr: stdout may be piped somewhere, and the question is for the person.
  prompt: (question) => promptHidden(question, process.stdin, process.stderr),
  // `npm run` runs this in the project's folder; a path the user typed is
  // relative to where they typed it, which npm passes as INIT_CWD.
  cwd: process.env.INIT_CWD || process.cwd(),
});
