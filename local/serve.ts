// The server's entry, shared by `npm start` (scripts/start.ts) and
// `conductor server` (scripts/server.ts, and the package's command): options
// from flags over the environment, the local stack, and a drain on SIGTERM
// or SIGINT (requests in flight answered, kept-alive connections closed, the
// sweep finished, the pool ended: local/stack.ts, stop).
import { loadConfig } from '../lib/config.ts';
import { type LocalStack, startLocalStack } from './stack.ts';

export interface ServeOptions {
  /** The address to bind (`--host`); over CONDUCTOR_HOST, default 127.0.0.1. */
  host?: string;
  /** The port (`--port`); over PORT, default 8080, 0 picks a free one. */
  port?: number;
  /** The environment the settings come from; default the process's. */
  env?: NodeJS.ProcessEnv;
}

/**
 * Starts the control plane as `conductor server` runs it; the caller stops it.
 * `say` is told one line for the migrations (else they are log lines).
 */
export async function serve(
  options: ServeOptions = {},
  say?: (line: string) => void,
): Promise<LocalStack> {
  const env: NodeJS.ProcessEnv = { ...(options.env ?? process.env) };
  if (options.host !== undefined) env.CONDUCTOR_HOST = options.host;
  if (options.port !== undefined) env.PORT = String(options.port);
  return startLocalStack(env, { requestLog: true, ...(say ? { say } : {}) });
}

/**
 * serve() until SIGTERM or SIGINT, then a drain and exit 0 (1 when the stop
 * failed). Prints to `out` one line for the migrations, then where it listens,
 * the database, the public URL, the admin token and the next step. A busy port
 * or a data directory another server uses is refused (thrown) in one line
 * before anything is made.
 */
export async function runServer(
  options: ServeOptions = {},
  out: (line: string) => void = console.log,
): Promise<LocalStack> {
  const stack = await serve(options, out);
  const config = loadConfig({ ...(options.env ?? process.env) });
  out(`Conductor is running at ${stack.url}`);
  out(`  listening:   ${stack.host} port ${stack.port}`);
  out(`  public URL:  ${config.CONDUCTOR_PUBLIC_URL ?? '(unset: links follow the request)'}`);
  out(`  database:    ${stack.database}`);
  out(`  admin token: ${stack.adminToken}`);
  out(
    'Next: conductor project create --id NAME --repo OWNER/NAME --repo-url URL (npm run ctl -- ... in a checkout); README.md, "Run it yourself".',
  );
  out('Stop it with Ctrl-C or SIGTERM.');
  let stopping = false;
  const shutdown = async (signal: string) => {
    if (stopping) return;
    stopping = true;
    out(`${signal}: stopping`);
    try {
      await stack.stop();
      out('stopped');
      process.exit(0);
    } catch (err) {
      console.error(err);
      process.exit(1);
    }
  };
  process.on('SIGINT', () => void shutdown('SIGINT'));
  process.on('SIGTERM', () => void shutdown('SIGTERM'));
  return stack;
}
