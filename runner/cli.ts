// `npm run runner -- --url URL --token-file PATH [options]`: parses the
// command line, starts a runner, and turns SIGTERM and SIGINT into a graceful stop.
import { parseArgs } from 'node:util';
import * as z from '../lib/zod.ts';
import { optionConflict, type Runner, type RunnerOptions, startRunner } from './index.ts';
import { chooseLogFormat, LOG_FORMATS, type LogFormat, loggerFor } from './logformat.ts';
import { forgetToken, readTokenFile, TOKEN_VARIABLE } from './token.ts';
import { RUNNER_VERSION } from './version.ts';

export const USAGE = `usage: npm run runner -- --url URL --token-file PATH [options]
       npx conductor-runner --url URL --token-file PATH [options]
       node conductor-runner.mjs --url URL --token-file PATH [options]

  --url URL            the control plane (default $CONDUCTOR_URL)
  --token-file PATH    a file holding the worker token from POST /v1/workers,
                       readable by the runner's user alone (or the token in
                       $CONDUCTOR_RUNNER_TOKEN)
  --run-as USER        run the shell executor's scripts as USER (the runner
                       must be root); a root runner's default is the user
                       conductor-build, made when missing: another uid is the
                       only way the shell executor keeps the worker token
                       from scripts
  --same-user          run the shell executor's scripts as the runner's own
                       user (root, when it is root): they can read the token
  --untrusted          the worker was registered untrusted: run only untrusted
                       tasks (a trusted one is failed at once), and never with
                       scripts under the runner's own uid
  --once               claim until one task comes, run it, report it and exit
                       (for an ephemeral worker's token)
  --idle-limit-s N     with --once: exit when no task was claimed within N
                       seconds (a runner a pool launched)
  --labels a,b         claim only tasks these labels satisfy (a subset of the
                       worker's registered labels; default all of them)
  --concurrency N      tasks run at once (default 1)
  --workdir DIR        where task workspaces are made (default <tmpdir>/conductor-runner)
  --executor KIND      shell (default): bash on this host; docker: each task in
                       its image (needs a Docker engine)
  --default-image IMG  the image of tasks that name none, with --executor docker
                       (default debian:bookworm-slim)
  --poll-max-s N       the longest wait between claims when idle (default 10)
  --claim-wait-s N     how long one claim waits for a task where the control
                       plane offers it (a long poll; default 25, at most 25;
                       0 polls only)
  --channel-poll-s N   with the push channel up (offered on AWS), the longest
                       wait between claims: what a lost hint costs at most
                       (default 300; 0 never uses the channel)
  --grace-s N          on SIGTERM, how long running tasks may finish before
                       they are given back (default 30)
  --kill-grace-s N     between SIGTERM and SIGKILL when a script is stopped (default 5)
  --http-timeout-s N   how long one call to the control plane may take (default 30)
  --log-format F       text (one line a person reads) or json (one JSON object
                       a line); default text when stderr is a terminal, else json
  --version            print the runner's version and exit
  -h, --help           this text`;

const seconds = (name: string, min: number) =>
  z.coerce
    .number({ error: `--${name} must be a number` })
    .check(
      z.gte(min, `--${name} must be at least ${min}`),
      z.lte(7 * 86_400, `--${name} is too large`),
    );

/** A whole number of `--name` between min and max. */
const whole = (name: string, min: number, max: number) =>
  z.coerce
    .number({ error: `--${name} must be a number` })
    .check(
      z.int(`--${name} must be a whole number`),
      z.gte(min, `--${name} must be at least ${min}`),
      z.lte(max, `--${name} must be at most ${max}`),
    );

/** The command line after parseArgs, checked. */
export const RunnerArgsSchema = z.object({
  url: z
    .string({ error: '--url (or $CONDUCTOR_URL) is required' })
    .check(z.regex(/^https?:\/\/\S+$/, '--url must be an http:// or https:// URL')),
  'token-file': z.optional(z.string().check(z.minLength(1, '--token-file must name a file'))),
  'run-as': z.optional(z.string().check(z.minLength(1, '--run-as must name a user'))),
  'same-user': z._default(z.boolean(), false),
  untrusted: z._default(z.boolean(), false),
  once: z._default(z.boolean(), false),
  'idle-limit-s': z.optional(seconds('idle-limit-s', 1)),
  labels: z.pipe(
    z.optional(z.string()),
    z.transform((v: string | undefined) =>
      v === undefined
        ? undefined
        : v
            .split(',')
            .map((l) => l.trim())
            .filter(Boolean),
    ),
  ),
  concurrency: z._default(whole('concurrency', 1, 256), 1),
  workdir: z.optional(z.string().check(z.minLength(1))),
  executor: z._default(
    z.enum(['shell', 'docker'], { error: '--executor must be shell or docker' }),
    'shell',
  ),
  'default-image': z.optional(z.string().check(z.minLength(1))),
  'poll-max-s': z._default(seconds('poll-max-s', 0.1), 10),
  'claim-wait-s': z._default(whole('claim-wait-s', 0, 25), 25),
  'channel-poll-s': z._default(
    z.coerce
      .number({ error: '--channel-poll-s must be a number' })
      .check(
        z.gte(0, '--channel-poll-s must be at least 0'),
        z.lte(3600, '--channel-poll-s must be at most 3600'),
      ),
    300,
  ),
  'grace-s': z._default(seconds('grace-s', 0), 30),
  'kill-grace-s': z._default(seconds('kill-grace-s', 0), 5),
  'http-timeout-s': z._default(seconds('http-timeout-s', 1), 30),
  'log-format': z.optional(z.enum(LOG_FORMATS, { error: '--log-format must be text or json' })),
});

/**
 * Turns a command line (and the environment's defaults) into runner options,
 * reading the token from --token-file or $CONDUCTOR_RUNNER_TOKEN.
 */
export async function parseRunnerArgs(
  argv: string[],
  env: NodeJS.ProcessEnv,
): Promise<RunnerOptions & { logFormat?: LogFormat }> {
  const { values } = parseArgs({
    args: argv,
    allowPositionals: false,
    options: {
      url: { type: 'string' },
      // Known only to be refused with a reason, rather than as an unknown option.
      token: { type: 'string' },
      'token-file': { type: 'string' },
      'run-as': { type: 'string' },
      'same-user': { type: 'boolean' },
      untrusted: { type: 'boolean' },
      once: { type: 'boolean' },
      'idle-limit-s': { type: 'string' },
      labels: { type: 'string' },
      concurrency: { type: 'string' },
      workdir: { type: 'string' },
      executor: { type: 'string' },
      'default-image': { type: 'string' },
      'poll-max-s': { type: 'string' },
      'claim-wait-s': { type: 'string' },
      'channel-poll-s': { type: 'string' },
      'grace-s': { type: 'string' },
      'kill-grace-s': { type: 'string' },
      'http-timeout-s': { type: 'string' },
      'log-format': { type: 'string' },
      help: { type: 'boolean', short: 'h' },
      version: { type: 'boolean' },
    },
  });
  if (values.help) throw new HelpRequested();
  if (values.version) throw new VersionRequested();
  if (values.token !== undefined) {
    // Every process on the host can read a command line (/proc/<pid>/cmdline,
    // ps), and so can the scripts this runner starts, whatever their user.
    throw new Error(
      `--token is not accepted: a command line is readable by every process on this host; put the token in a file for --token-file, or in $${TOKEN_VARIABLE}`,
    );
  }
  const parsed = RunnerArgsSchema.safeParse({
    ...values,
    url: values.url ?? (env.CONDUCTOR_URL || undefined),
  });
  if (!parsed.success) throw new Error(parsed.error.issues.map((i) => i.message).join('; '));
  const a = parsed.data;
  const fromEnv = env[TOKEN_VARIABLE] || undefined;
  if (a['token-file'] && fromEnv) {
    throw new Error(`give the worker token once: --token-file or $${TOKEN_VARIABLE}, not both`);
  }
  if (!a['token-file'] && !fromEnv) {
    throw new Error(`--token-file (or $${TOKEN_VARIABLE}) is required`);
  }
  const options: RunnerOptions & { logFormat?: LogFormat } = {
    url: a.url,
    token: a['token-file'] ? await readTokenFile(a['token-file']) : fromEnv!,
    ...(a['token-file'] ? { tokenFile: a['token-file'] } : {}),
    ...(a['run-as'] ? { runAs: a['run-as'] } : {}),
    ...(a['same-user'] ? { sameUser: true } : {}),
    ...(a.untrusted ? { untrusted: true } : {}),
    ...(a.once ? { once: true } : {}),
    ...(a['idle-limit-s'] !== undefined ? { idleLimitMs: a['idle-limit-s'] * 1000 } : {}),
    ...(a.labels ? { labels: a.labels } : {}),
    concurrency: a.concurrency,
    ...(a.workdir ? { workdir: a.workdir } : {}),
    executor: a.executor,
    ...(a['default-image'] ? { defaultImage: a['default-image'] } : {}),
    pollMaxMs: a['poll-max-s'] * 1000,
    claimWaitS: a['claim-wait-s'],
    channelPollMs: a['channel-poll-s'] * 1000,
    graceMs: a['grace-s'] * 1000,
    killGraceMs: a['kill-grace-s'] * 1000,
    httpTimeoutMs: a['http-timeout-s'] * 1000,
    ...(a['log-format'] ? { logFormat: a['log-format'] } : {}),
  };
  const conflict = optionConflict(options);
  if (conflict) throw new Error(conflict);
  return options;
}

class HelpRequested extends Error {}
class VersionRequested extends Error {}

export interface CliIo {
  env: NodeJS.ProcessEnv;
  /** Usage and start-up errors (stderr). */
  err: (line: string) => void;
  /** What was asked for: the version (stdout). Default: `err`. */
  out?: (line: string) => void;
  /** Where SIGTERM and SIGINT come from (the process). */
  signals?: Pick<NodeJS.Process, 'on' | 'off'>;
  /** Whether stderr is a terminal: the log is text there unless --log-format says otherwise. */
  isTTY?: boolean;
}

/**
 * Runs the runner until it is stopped (with --once, until its one task is
 * reported); answers the exit code: 0 after a graceful stop or a reported
 * task whatever its outcome, 1 when it could not start or stopped on an
 * error, 2 for a bad command line.
 */
export async function runnerMain(argv: string[], io: CliIo): Promise<number> {
  let options: RunnerOptions & { logFormat?: LogFormat };
  try {
    options = await parseRunnerArgs(argv, io.env);
  } catch (err) {
    if (err instanceof HelpRequested) {
      io.err(USAGE);
      return 0;
    }
    if (err instanceof VersionRequested) {
      // On stdout, unlike everything else: it is the answer asked for.
      (io.out ?? io.err)(`conductor-runner ${RUNNER_VERSION}`);
      return 0;
    }
    io.err(`${err instanceof Error ? err.message : String(err)}\n\n${USAGE}`);
    return 2;
  }
  let runner: Runner;
  try {
    // Before any script can start: gone from what children inherit, and from
    // this process's /proc/<pid>/environ.
    try {
      forgetToken(io.env, options.token);
    } catch (err) {
      throw new Error(
        `could not remove the worker token from this process's environment (${err instanceof Error ? err.message : err}); use --token-file`,
      );
    }
    const { logFormat, ...rest } = options;
    const format = chooseLogFormat(logFormat, io.isTTY ?? false);
    runner = await startRunner({
      ...rest,
      env: io.env,
      ...(format === 'text' ? { log: loggerFor('text', io.err) } : {}),
    });
  } catch (err) {
    io.err(`conductor-runner: ${err instanceof Error ? err.message : String(err)}`);
    return 1;
  }
  const signals = io.signals ?? process;
  let signalled = 0;
  const onSignal = (signal: NodeJS.Signals) => {
    // The first signal stops gracefully; a second one gives the tasks back at once.
    signalled++;
    io.err(
      signalled === 1
        ? `conductor-runner: ${signal}: finishing running tasks (send it again to give them back now)`
        : `conductor-runner: ${signal}: giving running tasks back`,
    );
    void runner.stop(signalled === 1 ? {} : { graceMs: 0 });
  };
  signals.on('SIGTERM', onSignal);
  signals.on('SIGINT', onSignal);
  try {
    await runner.done;
    return 0;
  } catch (err) {
    io.err(`conductor-runner: ${err instanceof Error ? err.message : String(err)}`);
    return 1;
  } finally {
    signals.off('SIGTERM', onSignal);
    signals.off('SIGINT', onSignal);
  }
}
