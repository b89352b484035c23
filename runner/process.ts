// Child processes in their own process group, so that stopping a task stops
// everything its script started, not only the shell.
import { type ChildProcess, spawn } from 'node:child_process';
import { StringDecoder } from 'node:string_decoder';

export interface Exit {
  /** The exit status, or null when a signal ended the process. */
  code: number | null;
  signal: NodeJS.Signals | null;
}

export interface GroupOptions {
  cwd?: string;
  env: Record<string, string>;
  /** Run as this uid and gid (the runner must be root); the child keeps no supplementary groups. */
  uid?: number;
  gid?: number;
  /** Receives the output as text; answering false pauses reading until `resume` is called. */
  onOutput: (text: string) => boolean;
  /** Called after onOutput answered false; call the function it is given to read on. */
  onPaused?: (resume: () => void) => void;
}

/** A process group started by `spawnGroup`. */
export interface Group {
  readonly pid: number | undefined;
  /** Resolves when the leader has exited and the output has been read. */
  readonly exited: Promise<Exit>;
  /** SIGTERM to the whole group, then SIGKILL after `graceMs` if it is still there. */
  kill(graceMs: number): void;
}

function signalGroup(pid: number | undefined, signal: NodeJS.Signals): void {
  if (pid === undefined) return;
  try {
    process.kill(-pid, signal);
  } catch {
    // ESRCH: the group is gone already.
  }
}

/** Starts `command` as the leader of a new process group, its stdout and stderr read as UTF-8 text. */
export function spawnGroup(command: string, args: string[], opts: GroupOptions): Group {
  const child: ChildProcess = spawn(command, args, {
    cwd: opts.cwd,
    env: opts.env,
    // libuv drops the supplementary groups (setgroups(0)) before setgid and setuid.
    ...(opts.uid === undefined ? {} : { uid: opts.uid }),
    ...(opts.gid === undefined ? {} : { gid: opts.gid }),
    // A new session and process group whose id is the child's pid.
    detached: true,
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  const pid = child.pid;
  let killTimer: NodeJS.Timeout | undefined;

  for (const stream of [child.stdout, child.stderr]) {
    if (!stream) continue;
    const decoder = new StringDecoder('utf8');
    stream.on('data', (data: Buffer) => {
      if (!opts.onOutput(decoder.write(data)) && opts.onPaused) {
        stream.pause();
        opts.onPaused(() => stream.resume());
      }
    });
    stream.on('end', () => {
      const rest = decoder.end();
      if (rest) opts.onOutput(rest);
    });
  }

  const exited = new Promise<Exit>((done) => {
    let exit: Exit | undefined;
    let closeTimer: NodeJS.Timeout | undefined;
    const finish = () => {
      if (killTimer) clearTimeout(killTimer);
      if (closeTimer) clearTimeout(closeTimer);
      done(exit ?? { code: null, signal: null });
    };
    child.once('error', (err) => {
      opts.onOutput(`${command}: ${err.message}\n`);
      exit = { code: 127, signal: null };
      finish();
    });
    child.once('exit', (code, signal) => {
      exit = { code, signal };
      // What the script left running in the background goes with it; it would
      // otherwise keep the output open (and the runner waiting).
      signalGroup(pid, 'SIGKILL');
      // A process that left the group may still hold the output open.
      closeTimer = setTimeout(() => {
        child.stdout?.destroy();
        child.stderr?.destroy();
        finish();
      }, 2_000);
    });
    child.once('close', finish);
  });

  return {
    pid,
    exited,
    kill(graceMs: number) {
      signalGroup(pid, 'SIGTERM');
      killTimer ??= setTimeout(() => signalGroup(pid, 'SIGKILL'), graceMs);
    },
  };
}

export interface RunResult extends Exit {
  output: string;
}

/** Runs a command to its end, collecting its output; `signal` kills its process group. */
export async function run(
  command: string,
  args: string[],
  opts: Pick<GroupOptions, 'cwd' | 'env' | 'uid' | 'gid'> & {
    signal?: AbortSignal;
    timeoutMs?: number;
  },
): Promise<RunResult> {
  let output = '';
  const group = spawnGroup(command, args, {
    env: opts.env,
    ...(opts.cwd ? { cwd: opts.cwd } : {}),
    ...(opts.uid === undefined ? {} : { uid: opts.uid }),
    ...(opts.gid === undefined ? {} : { gid: opts.gid }),
    onOutput: (text) => {
      // Enough to explain a failure; a command that talks more is cut.
      if (output.length < 64 * 1024) output += text;
      return true;
    },
  });
  const stop = () => group.kill(2_000);
  if (opts.signal?.aborted) stop();
  else opts.signal?.addEventListener('abort', stop, { once: true });
  const timer = opts.timeoutMs ? setTimeout(stop, opts.timeoutMs) : undefined;
  try {
    const exit = await group.exited;
    return { ...exit, output };
  } finally {
    if (timer) clearTimeout(timer);
    opts.signal?.removeEventListener('abort', stop);
  }
}
