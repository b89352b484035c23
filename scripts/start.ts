// npm start: the whole control plane on this machine (local/serve.ts), on
// 127.0.0.1 unless CONDUCTOR_HOST says otherwise.
import { ConfigError } from '../lib/config.ts';
import { runServer } from '../local/serve.ts';

try {
  await runServer();
} catch (err) {
  console.error(err instanceof ConfigError || err instanceof Error ? err.message : err);
  process.exit(1);
}
