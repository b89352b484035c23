// npm start: the whole control plane on this machine.
import { startLocalStack } from '../local/stack.ts';

const stack = await startLocalStack();
console.log(`Conductor is running at ${stack.url}`);
console.log(`  database:    ${stack.database}`);
console.log(`  admin token: ${stack.adminToken}`);
console.log('Press Ctrl-C to stop.');

let stopping = false;
async function shutdown(signal: string) {
  if (stopping) return;
  stopping = true;
  console.log(`${signal}: stopping`);
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
