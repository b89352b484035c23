// `npm run runner -- --url URL --token-file PATH [options]`: the reference runner
// (see docs/runner.md). Also the entry of `npm run build-runner`'s bundle,
// dist/conductor-runner.mjs.
import { runnerMain } from '../runner/cli.ts';

const code = await runnerMain(process.argv.slice(2), {
  env: process.env,
  err: (line) => process.stderr.write(`${line}\n`),
  out: (line) => process.stdout.write(`${line}\n`),
  isTTY: process.stderr.isTTY === true,
});
// Idle keep-alive sockets must not hold the process open once the runner is done.
process.exit(code);
