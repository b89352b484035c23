// --run-as USER: the shell executor's scripts run under another uid, so that
// nothing of the runner's (its /proc/<pid>/environ and mem, its token file)
// is readable to them. The kernel lets a process read another's environ and
// mem only under the same uid (and dumpable) or with CAP_SYS_PTRACE.
import { lchown, readdir } from 'node:fs/promises';
import { join } from 'node:path';
import { run } from './process.ts';

/** The user scripts run as. */
export interface RunAs {
  name: string;
  uid: number;
  gid: number;
  home: string;
}

/** The user a root runner's shell scripts run as when neither --run-as nor --same-user is given. */
export const BUILD_USER = 'conductor-build';

/**
 * Looks `user` (a name or a uid) up and checks that scripts can run as it:
 * the runner is root, the user is not, the user can enter `workdir` and
 * cannot read `tokenFile`. Each refusal says what to change, naming the
 * user as `label` does (default `--run-as USER`).
 */
export async function resolveRunAs(
  user: string,
  opts: { workdir: string; tokenFile?: string; env: Record<string, string>; label?: string },
): Promise<RunAs> {
  const self = process.getuid?.();
  if (self !== 0) {
    throw new Error(
      `--run-as needs the runner to run as root, which alone may start a process as another user (this runner runs as uid ${self ?? 'unknown'})`,
    );
  }
  const label = opts.label ?? `--run-as ${user}`;
  const found = await passwd(user, opts.env);
  if (typeof found === 'string') {
    throw new Error(`${label}: ${found === 'none' ? 'there is no such user' : found}`);
  }
  const who = found;
  if (who.uid === 0) throw new Error(`${label} is root; name an unprivileged user`);

  // Asked of the user itself (access(2) under its uid), not guessed from mode bits.
  const probe = await run(
    'sh',
    ['-c', 'cd "$1" || exit 3; if [ -n "$2" ] && [ -r "$2" ]; then exit 4; fi', 'sh'].concat(
      opts.workdir,
      opts.tokenFile ?? '',
    ),
    { env: opts.env, uid: who.uid, gid: who.gid, timeoutMs: 10_000 },
  );
  if (probe.code === 3) {
    throw new Error(
      `${label}: that user cannot enter --workdir ${opts.workdir} (it and the directories above it must be searchable, chmod o+x)`,
    );
  }
  if (probe.code === 4) {
    throw new Error(
      `${label}: that user can read the token file ${opts.tokenFile}; make it readable by the runner's user alone (chmod 600, owned by root)`,
    );
  }
  if (probe.code !== 0) {
    throw new Error(
      `${label}: could not start a process as that user: ${probe.output.trim().slice(0, 200) || `exit ${probe.code}`}`,
    );
  }
  return who;
}

/** The passwd entry of `user`; 'none' when there is none, or why it could not be asked. */
async function passwd(user: string, env: Record<string, string>): Promise<RunAs | string> {
  const found = await run('getent', ['passwd', user], { env, timeoutMs: 10_000 });
  // 2: no such key.
  if (found.code === 2) return 'none';
  if (found.code !== 0) {
    return `getent passwd failed: ${found.output.trim().slice(0, 200) || `exit ${found.code}`}`;
  }
  const [name, , uid, gid, , home] = found.output.trim().split('\n')[0]!.split(':');
  const who: RunAs = { name: name!, uid: Number(uid), gid: Number(gid), home: home || '/' };
  if (!Number.isInteger(who.uid) || !Number.isInteger(who.gid)) {
    return 'getent passwd answered no uid and gid';
  }
  return who;
}

/**
 * Makes `name` a system user with a group and a home of its own
 * (/var/lib/NAME) when the machine has no such user, as `npm start` makes the
 * postgres user; `say` is told when it was made. Answers whether it was made.
 */
export async function ensureUser(
  name: string,
  env: Record<string, string>,
  say: (line: string) => void,
): Promise<boolean> {
  const found = await passwd(name, env);
  if (found !== 'none') return false;
  const made = await run(
    'useradd',
    [
      '--system',
      '--user-group',
      '--create-home',
      '--home-dir',
      `/var/lib/${name}`,
      '--shell',
      '/usr/sbin/nologin',
      name,
    ],
    { env, timeoutMs: 30_000 },
  );
  if (made.code !== 0) {
    // Another runner starting at the same moment may have made it first.
    if ((await passwd(name, env)) !== 'none') return false;
    throw new Error(
      `could not make the user ${name} that scripts run as (useradd: ${made.output.trim().slice(0, 200) || `exit ${made.code}`}): make an unprivileged user and give --run-as USER, or give --same-user to run scripts as root`,
    );
  }
  say(
    `made the system user ${name}, which runs this runner's scripts (so that they cannot read its worker token)`,
  );
  return true;
}

/** Gives `dir` and everything under it to `who`, symbolic links themselves rather than what they point at. */
export async function chownTree(dir: string, who: RunAs): Promise<void> {
  await lchown(dir, who.uid, who.gid);
  // Not readdir's `recursive`: it descends through a symbolic link to a
  // directory, and a checkout may hold one pointing at /etc.
  for (const entry of await readdir(dir, { withFileTypes: true })) {
    const path = join(dir, entry.name);
    if (entry.isDirectory()) await chownTree(path, who);
    else await lchown(path, who.uid, who.gid);
  }
}
