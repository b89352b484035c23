// npm run demo: the whole system in one command; exits 0 when the job succeeded.
import { runDemo } from '../local/demo.ts';

const result = await runDemo((line) => console.log(line));
process.exit(result.jobState === 'success' ? 0 : 1);
