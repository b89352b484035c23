// npm run demo [-- --keep]: the whole system in one command; exits 0 when the
// job succeeded. --keep leaves the stack and its runners up until Ctrl-C, and
// only then is the job page's link printed (without it, nothing would answer).
import { runDemo } from '../local/demo.ts';

const keep = process.argv.includes('--keep');
const result = await runDemo((line) => console.log(line), {
  ...(keep
    ? {
        keep: () =>
          new Promise<void>((done) => {
            process.once('SIGINT', () => done());
            process.once('SIGTERM', () => done());
          }),
      }
    : {}),
});
process.exit(result.jobState === 'success' ? 0 : 1);
