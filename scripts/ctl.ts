import { runCtl } from '../local/ctl.ts';

process.exitCode = await runCtl(process.argv.slice(2), {
  out: (line) => console.log(line),
  env: process.env,
});
