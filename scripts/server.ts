// npm run server -- [--host ADDRESS] [--port N]: what `conductor server` runs
// (local/serve.ts): the control plane on DATABASE_URL (or the embedded
// PostgreSQL when it is unset), with its settings from the environment.
import { parseArgs } from 'node:util';
import { runServer } from '../local/serve.ts';

const USAGE = `usage: npm run server -- [--host ADDRESS] [--port N]
  --host   the address to bind (CONDUCTOR_HOST, default 127.0.0.1; 0.0.0.0 for every interface)
  --port   the port (PORT, default 8080; 0 picks a free one)
Every other setting comes from the environment (README.md, "Configuration"; docs/self-host.md).`;

let values: { host?: string; port?: string; help?: boolean };
try {
  ({ values } = parseArgs({
    options: {
      host: { type: 'string' },
      port: { type: 'string' },
      help: { type: 'boolean', short: 'h' },
    },
    strict: true,
  }));
} catch (err) {
  console.error(`${err instanceof Error ? err.message : err}\n${USAGE}`);
  process.exit(2);
}
if (values.help) {
  console.log(USAGE);
  process.exit(0);
}
if (values.port !== undefined && !/^\d{1,5}$/.test(values.port)) {
  console.error(`--port: "${values.port}" is not a port number\n${USAGE}`);
  process.exit(2);
}

try {
  await runServer({
    ...(values.host !== undefined ? { host: values.host } : {}),
    ...(values.port !== undefined ? { port: Number(values.port) } : {}),
  });
} catch (err) {
  // A setting that is wrong, a database that refuses, a migration changed
  // after it was applied: the message names it, and the service manager
  // sees the exit status.
  console.error(err instanceof Error ? err.message : err);
  process.exit(1);
}
