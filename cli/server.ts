// `conductor server`: the control plane on this machine, what `npm start`
// starts (local/stack.ts): the embedded PostgreSQL unless DATABASE_URL is
// given, the migrations, the functions behind the local HTTP server, the
// sweep. --port and --host are passed through as PORT and CONDUCTOR_HOST.
import type { Command } from 'commander';
import { CliError, type CliIo } from './context.ts';

/** `server`. */
export function registerServer(program: Command, io: CliIo): void {
  program
    .command('server')
    .description('run the control plane here (the embedded PostgreSQL unless DATABASE_URL is set)')
    .option('--port <N>', 'the port to listen on (default $PORT, else 8080)')
    .option('--host <ADDRESS>', 'the address to bind (default $CONDUCTOR_HOST, else 127.0.0.1)')
    .action(async (o) => {
      const env = { ...io.env };
      if (o.port !== undefined) {
        if (!/^\d+$/.test(o.port)) throw new CliError(`--port takes a number, not ${o.port}`, 2);
        env.PORT = o.port;
      }
      if (o.host !== undefined) env.CONDUCTOR_HOST = o.host;
      const { serve } = await import('../local/serve.ts');
      await serve(env, io.out);
    });
}
