// npm start: the whole control plane on this machine (what `conductor server` runs).
import { serve } from '../local/serve.ts';

await serve(process.env, (line) => console.log(line));
