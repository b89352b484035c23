// `conductor server`: the control plane on this machine, what `npm start`
// starts (local/stack.ts): the embedded PostgreSQL unless DATABASE_URL is
// given, the migrations, the functions behind the local HTTP server, the
// sweep (local/serve.ts, runServer). --port and --host win over PORT and
// CONDUCTOR_HOST.
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
      if (o.port !== undefined && !/^\d{1,5}$/.test(o.port)) {
        throw new CliError(`--port takes a number, not ${o.port}`, 2);
      }
      const { runServer } = await import('../local/serve.ts');
      await runServer(
        {
          env: { ...io.env },
          ...(o.host !== undefined ? { host: o.host } : {}),
          ...(o.port !== undefined ? { port: Number(o.port) } : {}),
        },
        io.out,
      );
    });
}
