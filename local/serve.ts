// `npm start` and `conductor server`: the local stack in the foreground,
// with its banner, until SIGINT or SIGTERM.
import { startLocalStack } from './stack.ts';

/** Starts the stack with `env`, prints where it is, and stops it on a signal. */
export async function serve(env: NodeJS.ProcessEnv, out: (line: string) => void): Promise<void> {
  const stack = await startLocalStack(env);
  out(`Conductor is running at ${stack.url}`);
  out(`  database:    ${stack.database}`);
  out(`  admin token: ${stack.adminToken}`);
  out('Press Ctrl-C to stop.');

  let stopping = false;
  async function shutdown(signal: string) {
    if (stopping) return;
    stopping = true;
    out(`${signal}: stopping`);
    try {
      await stack.stop();
      process.exit(0);
    } catch (err) {
      console.error(err);
      process.exit(1);
    }
  }
  process.on('SIGINT', () => void shutdown('SIGINT'));
  process.on('SIGTERM', () => void shutdown('SIGTERM'));
}
