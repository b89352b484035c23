// Reading a file that a script could have replaced. Under the docker executor
// a container's root writes where the runner reads afterwards, as the runner's
// user on the host: a link there would make the runner read a host file for
// it, and a FIFO would block a plain read forever (while heartbeats keep the
// lease alive). So: no link is followed, the open never waits, only a regular
// file is read, never more than a cap, and no error quotes what it holds.
import { constants, type Stats } from 'node:fs';
import { lstat, open } from 'node:fs/promises';

/** The file is not one the runner reads; the message names it, never its content. */
export class TaskFileError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'TaskFileError';
  }
}

function kind(s: Stats): string {
  if (s.isSymbolicLink()) return 'a symbolic link';
  if (s.isFIFO()) return 'a named pipe (FIFO)';
  if (s.isCharacterDevice()) return 'a character device';
  if (s.isBlockDevice()) return 'a block device';
  if (s.isSocket()) return 'a socket';
  if (s.isDirectory()) return 'a directory';
  return 'not a regular file';
}

// O_NONBLOCK: opening a FIFO for reading then returns at once instead of
// waiting for a writer, and so does a device that would wait (a tty, a tape).
// O_NOCTTY: a terminal there never becomes the runner's.
const FLAGS = constants.O_RDONLY | constants.O_NOFOLLOW | constants.O_NONBLOCK | constants.O_NOCTTY;

/**
 * Reads `path` as UTF-8 text when it is a regular file of at most `maxBytes`;
 * otherwise throws a TaskFileError that names it as `what`. `missing` is
 * answered when there is no such file, if given.
 */
export async function readTaskFile(
  path: string,
  what: string,
  maxBytes: number,
  missing?: string,
): Promise<string> {
  const notRegular = (s: Stats) =>
    new TaskFileError(
      `${what} is ${kind(s)}, not a regular file: the runner reads only a regular file there`,
    );
  let before: Stats;
  try {
    // Looked at first, so that a device is never opened at all.
    before = await lstat(path);
  } catch (err) {
    const code = (err as NodeJS.ErrnoException).code;
    if (code === 'ENOENT' && missing !== undefined) return missing;
    throw new TaskFileError(
      code === 'ENOENT' ? `${what} is missing` : `${what} could not be read (${code ?? err})`,
    );
  }
  if (!before.isFile()) throw notRegular(before);
  let handle: Awaited<ReturnType<typeof open>>;
  try {
    handle = await open(path, FLAGS);
  } catch (err) {
    const code = (err as NodeJS.ErrnoException).code;
    // ELOOP: it became a link since the lstat.
    if (code === 'ELOOP') throw new TaskFileError(`${what} is a symbolic link, not a regular file`);
    throw new TaskFileError(`${what} could not be opened (${code ?? err})`);
  }
  try {
    const opened = await handle.stat();
    if (!opened.isFile()) throw notRegular(opened);
    if (opened.dev !== before.dev || opened.ino !== before.ino) {
      throw new TaskFileError(`${what} was replaced while the runner opened it`);
    }
    const tooLarge = () =>
      new TaskFileError(`${what} holds more than ${maxBytes} bytes, the most the runner reads`);
    if (opened.size > maxBytes) throw tooLarge();
    // One byte more than allowed, to tell a file that grew past the cap.
    const buffer = Buffer.alloc(maxBytes + 1);
    let filled = 0;
    while (filled < buffer.length) {
      const { bytesRead } = await handle.read(buffer, filled, buffer.length - filled, filled);
      if (bytesRead === 0) break;
      filled += bytesRead;
    }
    if (filled > maxBytes) throw tooLarge();
    return buffer.subarray(0, filled).toString('utf8');
  } finally {
    await handle.close();
  }
}
