// The runner's side of artifacts and caches (docs/artifacts.md): the files a
// pipeline names, found in the checkout; archives (tar.gz) of several files
// or directories; and the transfers to and from the store's signed URLs,
// streamed from and to the disk. Before the script, the artifacts of the
// task's needs go to $CONDUCTOR_ARTIFACTS/<task name>/; after it, the task's
// own are uploaded (as its `when:` says).
import { createHash } from 'node:crypto';
import { constants, createReadStream, createWriteStream } from 'node:fs';
import {
  chmod,
  type FileHandle,
  lstat,
  mkdir,
  mkdtemp,
  open,
  readdir,
  readlink,
  realpath,
  rm,
  stat,
  statfs,
  symlink,
  utimes,
} from 'node:fs/promises';
import { request as httpRequest } from 'node:http';
import { request as httpsRequest } from 'node:https';
import { dirname, isAbsolute, join, relative, sep } from 'node:path';
import { Readable } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import * as tar from 'tar';
import {
  MatchBudget,
  MatchBudgetError,
  PathPatternError,
  pathMatcher,
} from '../lib/pipeline/pathglob.ts';
import { HttpStatusError, type RunnerClient } from './client.ts';
import type { Task } from './protocol.ts';

/** Most files one artifact or cache may gather; past it the task fails, naming the limit. */
export const MAX_FILES = 100_000;

/**
 * Steps of matching one artifact's or cache's paths may take (the compile's
 * matcher, lib/pipeline/pathglob.ts): ample for a checkout of MAX_FILES files,
 * a second or so at worst; past it the task fails, naming the limit.
 */
export const MATCH_STEPS = 200_000_000;

/** A file (or link) under the workspace that a pipeline's paths matched. */
export interface Found {
  /** Relative to the workspace, with `/`. */
  path: string;
  size: number;
  link: boolean;
}

/** A failure the task's log and error show as it is (a limit, a refusal), not transient. */
export class StorageError extends Error {
  constructor(
    message: string,
    readonly transient = false,
  ) {
    super(message);
    this.name = 'StorageError';
  }
}

/**
 * Checks that the needed tasks' artifact directories are distinct: `/` made
 * `_` could put two tasks (`build (os: a/b)`, `build (os: a_b)`) in one
 * directory, one's files over the other's. Throws a StorageError naming both.
 */
export function checkArtifactDirs(taskNames: string[]): void {
  const byDir = new Map<string, string>();
  for (const name of new Set(taskNames)) {
    const dir = artifactDirName(name);
    const other = byDir.get(dir);
    if (other !== undefined) {
      throw new StorageError(
        `tasks ${JSON.stringify(other)} and ${JSON.stringify(name)} would share $CONDUCTOR_ARTIFACTS/${dir}/ (a / in a name becomes _); rename one of them`,
      );
    }
    byDir.set(dir, name);
  }
}

/** The directory name of a task's artifacts: its name, with `/` (a matrix value's) made `_`. */
export function artifactDirName(taskName: string): string {
  const safe = taskName.replace(/[/\0]/g, '_');
  return safe === '.' || safe === '..' ? safe.replace(/\./g, '_') : safe;
}

// O_PATH (Linux): an fd that names a file without opening it, so no device
// driver's open runs and no FIFO waits; fstat and /proc/self/fd work on it.
const O_PATH = 0o10000000;

/** Whether `real` (an absolute real path) is `realRoot` itself or below it. */
function isBelow(realRoot: string, real: string, self = false): boolean {
  const inside = relative(realRoot, real);
  if (inside === '') return self;
  return inside !== '..' && !inside.startsWith(`..${sep}`) && !isAbsolute(inside);
}

/** A read failure as the task's error: a StorageError naming the path, never a retry. */
function readFailure(rel: string, err: unknown): StorageError {
  if (err instanceof StorageError) return err;
  const code = (err as NodeJS.ErrnoException).code;
  return Object.assign(
    new StorageError(`${rel} cannot be read: ${code ?? (err as Error).message}`),
    { code },
  );
}

/**
 * The one answer for a path that is not there, not a directory where one was
 * listed, or that resolves outside the checkout: one message for all, so
 * that a link to a root-only host directory does not tell the task which
 * names exist there.
 */
function goneOrOutside(rel: string): StorageError {
  return Object.assign(new StorageError(`${rel} is gone or outside the checkout: not read`), {
    code: 'GONE',
  });
}

/**
 * An O_PATH descriptor of `rel` under `root` whose real path (read from the
 * descriptor, /proc/self/fd) is inside `realRoot`, `root`'s real path; the
 * last component is never followed. Throws a StorageError naming `rel`.
 * A directory above `rel` swapped for a link to /etc or /dev shows in the
 * descriptor's path, and nothing on the way was opened for reading.
 */
async function pathInside(
  root: string,
  realRoot: string,
  rel: string,
  flags = 0,
): Promise<FileHandle> {
  const full = rel === '' ? root : join(root, ...rel.split('/'));
  const handle = await open(full, O_PATH | constants.O_NOFOLLOW | flags).catch((err) => {
    const code = (err as NodeJS.ErrnoException).code;
    if (code === 'ENOENT' || code === 'ENOTDIR' || code === 'ELOOP') throw goneOrOutside(rel);
    throw readFailure(rel, err);
  });
  try {
    // No fallback to a path-based check: without /proc, nothing is read.
    const real = await readlink(`/proc/self/fd/${handle.fd}`);
    if (!isBelow(realRoot, real, rel === '')) throw goneOrOutside(rel);
    return handle;
  } catch (err) {
    await handle.close();
    throw readFailure(rel, err);
  }
}

/**
 * The files under `root` that `patterns` match (globs, relative to it; a
 * pattern naming a directory takes everything under it). Links are listed,
 * never followed: a script cannot make the runner read outside the checkout.
 * Each directory is listed through a checked descriptor (pathInside), so a
 * directory swapped for a link during the walk (a process the script left
 * running) fails the walk instead of listing a host directory.
 */
export async function findFiles(root: string, patterns: string[]): Promise<Found[]> {
  const clean = patterns.map((p) => p.replace(/^\.\//, '').replace(/\/+$/, ''));
  let matcher: (path: string) => boolean;
  try {
    // A pattern that names a directory takes everything under it.
    matcher = pathMatcher(clean, new MatchBudget(MATCH_STEPS), { under: true });
  } catch (error) {
    // The compile refuses these (lib/pipeline/schema.ts); a task queued before it did fails here.
    if (!(error instanceof PathPatternError)) throw error;
    throw new StorageError(`a path pattern cannot be used: ${error.message}`);
  }
  const match = (rel: string) => {
    try {
      return matcher(rel);
    } catch (error) {
      if (!(error instanceof MatchBudgetError)) throw error;
      throw new StorageError(
        `matching the paths took more than ${MATCH_STEPS} steps; simplify the patterns`,
      );
    }
  };
  const realRoot = await realpath(root);
  const found: Found[] = [];
  const walk = async (relDir: string): Promise<void> => {
    let dir: FileHandle;
    try {
      dir = await pathInside(root, realRoot, relDir, constants.O_DIRECTORY);
    } catch (err) {
      // Gone, a link now, outside, or deeper than a path can name: not
      // listed, and the same silence for each (goneOrOutside).
      const code = (err as { code?: string }).code;
      if (relDir !== '' && (code === 'GONE' || code === 'ENAMETOOLONG')) return;
      throw err;
    }
    let entries: import('node:fs').Dirent[];
    try {
      entries = await readdir(`/proc/self/fd/${dir.fd}`, { withFileTypes: true }).catch(() => []);
      for (const entry of entries) {
        const rel = relDir === '' ? entry.name : `${relDir}/${entry.name}`;
        if (rel === '.git' || rel.startsWith('.git/')) continue;
        if (entry.isDirectory()) continue;
        if ((entry.isFile() || entry.isSymbolicLink()) && match(rel)) {
          const info = await lstat(`/proc/self/fd/${dir.fd}/${entry.name}`).catch(() => null);
          if (!info) continue;
          found.push({
            path: rel,
            size: info.isFile() ? info.size : 0,
            link: info.isSymbolicLink(),
          });
          if (found.length > MAX_FILES) {
            throw new StorageError(
              `the paths match more than ${MAX_FILES} files; at most ${MAX_FILES} are allowed`,
            );
          }
        }
      }
    } finally {
      await dir.close();
    }
    for (const entry of entries) {
      const rel = relDir === '' ? entry.name : `${relDir}/${entry.name}`;
      if (rel === '.git' || rel.startsWith('.git/')) continue;
      if (entry.isDirectory()) await walk(rel);
    }
  };
  await walk('');
  return found.sort((a, b) => (a.path < b.path ? -1 : a.path > b.path ? 1 : 0));
}

/**
 * Opens `rel` under `root` for reading, as a regular file whose real path is
 * inside `root` (the real path, `realRoot`), or throws a StorageError naming
 * it. The files were found by a walk, but the task's processes may still be
 * running (one that left its process group) and the runner may be root: a
 * file swapped for a link after the walk, or a directory above it swapped
 * for a link to /etc or /dev, must not be read through, and nothing but a
 * regular file is ever opened for reading (a device's open has effects of
 * its own; a FIFO's waits). So the file is first named by an O_PATH
 * descriptor (pathInside), checked to be a regular file inside the checkout,
 * and only then opened, through that descriptor (/proc/self/fd), with
 * O_NOCTTY and O_NONBLOCK.
 */
export async function openInside(root: string, realRoot: string, rel: string): Promise<FileHandle> {
  const named = await pathInside(root, realRoot, rel);
  try {
    const info = await named.stat();
    if (info.isSymbolicLink())
      throw new StorageError(`${rel} became a link after it was found: not read`);
    if (!info.isFile()) throw new StorageError(`${rel} is not a regular file`);
    // A hard link the task made to a file it does not own (a host's
    // /etc/shadow, where fs.protected_hardlinks is off) is inside the checkout
    // by every path check: refused unless its owner is the checkout's.
    if (info.nlink > 1 && info.uid !== (await stat(realRoot)).uid) {
      throw new StorageError(`${rel} is a hard link to a file the checkout's owner does not own`);
    }
    return await open(
      `/proc/self/fd/${named.fd}`,
      constants.O_RDONLY | constants.O_NOCTTY | constants.O_NONBLOCK,
    );
  } catch (err) {
    throw readFailure(rel, err);
  } finally {
    await named.close();
  }
}

/**
 * Copies `files` (found under `root`) into `dest`, the runner's own
 * directory, each file read through `openInside` up to the size it has when
 * opened, with its permission bits and times; links are made again as links
 * (their targets are only text, read through a checked descriptor of their
 * directory). What is uploaded is this copy, so nothing the task does after
 * the copy changes it or what it points at. Before copying, the sizes found
 * must fit in the free space of `dest`'s file system (a sparse file of a
 * terabyte takes no disk in the checkout, and all of it in a copy).
 */
export async function copyOut(root: string, files: Found[], dest: string): Promise<void> {
  const realRoot = await realpath(root);
  const total = files.reduce((n, f) => n + f.size, 0);
  const free = await statfs(dest).then(
    (s) => Number(s.bavail) * Number(s.bsize),
    () => Number.POSITIVE_INFINITY,
  );
  // The copy, then its archive: twice the sizes found, so that a sparse file
  // (or many) just under the free space cannot fill the runner's disk.
  if (total * 2 > free) {
    throw new StorageError(
      `the files matched hold ${total} bytes; the runner copies and archives them where ${free} bytes are free, and needs twice their size`,
    );
  }
  let copied = 0;
  for (const f of files) {
    try {
      copied += await copyOne(root, realRoot, f, dest, free, copied);
    } catch (err) {
      throw copyFailure(f.path, err);
    }
  }
}

/** A failure while copying `rel`: the task's error, naming only the workspace path. */
function copyFailure(rel: string, err: unknown): StorageError {
  if (err instanceof StorageError) return err;
  const code = (err as NodeJS.ErrnoException).code;
  if (code === 'ENOSPC' || code === 'EDQUOT') {
    return new StorageError(`${rel} could not be copied: no space left where the runner copies it`);
  }
  return new StorageError(`${rel} could not be copied: ${code ?? 'an error'}`);
}

/** copyOut of one file or link; answers the bytes copied. */
async function copyOne(
  root: string,
  realRoot: string,
  f: Found,
  dest: string,
  free: number,
  copied: number,
): Promise<number> {
  const to = join(dest, ...f.path.split('/'));
  await mkdir(dirname(to), { recursive: true, mode: 0o700 });
  if (f.link) {
    const slash = f.path.lastIndexOf('/');
    const dir = await pathInside(
      root,
      realRoot,
      f.path.slice(0, Math.max(slash, 0)),
      constants.O_DIRECTORY,
    );
    try {
      const target = await readlink(`/proc/self/fd/${dir.fd}/${f.path.slice(slash + 1)}`).catch(
        () => {
          throw goneOrOutside(f.path);
        },
      );
      await symlink(target, to);
    } finally {
      await dir.close();
    }
    return 0;
  }
  const handle = await openInside(root, realRoot, f.path);
  try {
    const info = await handle.stat();
    if ((copied + info.size) * 2 > free) {
      throw new StorageError(
        `${f.path} grew to ${info.size} bytes after it was found: the files no longer fit twice in the ${free} bytes free where the runner copies them`,
      );
    }
    // Up to the size it has now: a file a leftover process keeps writing
    // is read as far as it was when opened.
    const source =
      info.size === 0
        ? Readable.from([])
        : handle.createReadStream({ autoClose: false, start: 0, end: info.size - 1 });
    await pipeline(source, createWriteStream(to, { mode: 0o600 }));
    await chmod(to, info.mode & 0o777);
    await utimes(to, info.atime, info.mtime);
    return info.size;
  } finally {
    await handle.close();
  }
}

/** Writes a tar.gz of `files` (relative to `root`) to `out`; links stay links. */
export async function pack(root: string, files: Found[], out: string): Promise<void> {
  await tar.create(
    { gzip: true, cwd: root, file: out, portable: true, follow: false },
    files.map((f) => f.path),
  );
}

/** What an archive may hold: files, directories and links, nothing else. */
const UNPACKED_TYPES = new Set(['File', 'OldFile', 'ContiguousFile', 'Directory', 'SymbolicLink']);

/**
 * Unpacks a tar.gz into `dir`; entries that would land outside it are refused
 * by tar. Unprivileged whoever runs it: a root runner would otherwise keep the
 * archive's owner (0/0) and a setuid bit a task set on its own file, handing
 * the next task a setuid-root binary. So owners are never kept, modes keep
 * only their permission bits (no setuid, setgid or sticky), and device files,
 * FIFOs and hard links are left out.
 */
export async function unpack(file: string, dir: string): Promise<void> {
  await mkdir(dir, { recursive: true });
  await tar.extract({
    file,
    cwd: dir,
    strict: true,
    preservePaths: false,
    preserveOwner: false,
    noChmod: false,
    filter: (_path, entry) => {
      if (!('type' in entry) || !UNPACKED_TYPES.has(entry.type)) return false;
      if (typeof entry.mode === 'number') entry.mode &= 0o777;
      return true;
    },
  });
}

/** The SHA-256 (hex) and size of a file. */
export async function digest(file: string): Promise<{ sha256: string; size: number }> {
  const hash = createHash('sha256');
  let size = 0;
  for await (const chunk of createReadStream(file)) {
    hash.update(chunk as Buffer);
    size += (chunk as Buffer).length;
  }
  return { sha256: hash.digest('hex'), size };
}

/** An upload's URLs, as the control plane answers them. */
export interface Upload {
  upload_id: string | null;
  parts: Array<{ url: string; size: number }>;
}

/** PUTs a file to its parts' URLs, streamed; answers each part's ETag. */
export async function putParts(
  base: string,
  file: string,
  upload: Upload,
  signal: AbortSignal,
): Promise<string[]> {
  const etags: string[] = [];
  let start = 0;
  for (const part of upload.parts) {
    etags.push(await putRange(new URL(part.url, base), file, start, part.size, signal));
    start += part.size;
  }
  return etags;
}

function putRange(
  url: URL,
  file: string,
  start: number,
  size: number,
  signal: AbortSignal,
): Promise<string> {
  return new Promise((resolve, reject) => {
    const send = url.protocol === 'https:' ? httpsRequest : httpRequest;
    const req = send(url, {
      method: 'PUT',
      headers: { 'content-length': String(size), 'content-type': 'application/octet-stream' },
      signal,
    });
    req.on('response', (res) => {
      const chunks: Buffer[] = [];
      res.on('data', (c: Buffer) => chunks.push(c));
      res.on('end', () => {
        if ((res.statusCode ?? 0) >= 300) {
          const text = Buffer.concat(chunks).toString('utf8').slice(0, 300);
          reject(
            new StorageError(
              `the store refused an upload: HTTP ${res.statusCode} ${text}`,
              (res.statusCode ?? 0) >= 500,
            ),
          );
        } else resolve(String(res.headers.etag ?? ''));
      });
      res.on('error', reject);
    });
    req.on('error', (err) => reject(new StorageError(`an upload failed: ${err.message}`, true)));
    const body =
      size === 0 ? Readable.from([]) : createReadStream(file, { start, end: start + size - 1 });
    body.on('error', reject);
    body.pipe(req);
  });
}

/** GETs a URL (relative ones against the control plane) to a file, streamed; answers its SHA-256. */
export async function download(
  base: string,
  url: string,
  file: string,
  signal: AbortSignal,
): Promise<string> {
  const res = await fetch(new URL(url, base), { signal, redirect: 'follow' });
  if (!res.ok || !res.body) {
    throw new StorageError(`a download failed: HTTP ${res.status}`, res.status >= 500);
  }
  await mkdir(dirname(file), { recursive: true });
  const hash = createHash('sha256');
  await pipeline(
    Readable.fromWeb(res.body as import('node:stream/web').ReadableStream<Uint8Array>),
    async function* (source: AsyncIterable<Buffer>) {
      for await (const chunk of source) {
        hash.update(chunk);
        yield chunk;
      }
    },
    createWriteStream(file),
  );
  return hash.digest('hex');
}

/** Where a task's storage work happens, and how it reports. */
export interface StorageContext {
  client: RunnerClient;
  task: Task;
  workspace: string;
  /** $CONDUCTOR_ARTIFACTS on the host. */
  artifactsDir: string;
  /** Scratch space for archives, outside the workspace. */
  scratch: string;
  note: (text: string) => void;
  signal: AbortSignal;
  retryForMs: number;
}

const taskPath = (ctx: StorageContext, rest: string) =>
  `/v1/runner/tasks/${encodeURIComponent(ctx.task.id)}/${rest}`;

/** Downloads the artifacts of the task's needs into $CONDUCTOR_ARTIFACTS/<task name>/. */
export async function restoreNeededArtifacts(ctx: StorageContext): Promise<void> {
  await mkdir(ctx.artifactsDir, { recursive: true, mode: 0o755 });
  const answer = await ctx.client.post(
    taskPath(ctx, 'needs-artifacts'),
    { lease_id: ctx.task.lease_id },
    { retryForMs: ctx.retryForMs, signal: ctx.signal },
  );
  const artifacts = (answer.body as { artifacts?: NeededArtifact[] }).artifacts ?? [];
  checkArtifactDirs(artifacts.map((a) => a.task_name));
  for (const artifact of artifacts) {
    const dir = join(ctx.artifactsDir, artifactDirName(artifact.task_name));
    await mkdir(dir, { recursive: true, mode: 0o755 });
    if (artifact.kind === 'file') {
      if (artifact.path.split('/').includes('..') || artifact.path.startsWith('/')) {
        throw new StorageError(
          `artifact path ${JSON.stringify(artifact.path)} leaves its directory`,
        );
      }
      const target = join(dir, ...artifact.path.split('/'));
      const sha = await download(ctx.client.url, artifact.url, target, ctx.signal);
      if (sha !== artifact.sha256)
        throw new StorageError(
          `artifact ${artifact.path} of ${artifact.task_name} arrived damaged (sha256 differs)`,
          true,
        );
    } else {
      const temp = join(ctx.scratch, `needs-${Math.random().toString(36).slice(2)}.tar.gz`);
      const sha = await download(ctx.client.url, artifact.url, temp, ctx.signal);
      if (sha !== artifact.sha256)
        throw new StorageError(
          `artifact ${artifact.path} of ${artifact.task_name} arrived damaged (sha256 differs)`,
          true,
        );
      await unpack(temp, dir);
      await rm(temp, { force: true });
    }
    ctx.note(
      `artifact ${artifact.path} of ${artifact.task_name} (${artifact.size} bytes) is in $CONDUCTOR_ARTIFACTS/${artifactDirName(artifact.task_name)}/`,
    );
  }
}

interface NeededArtifact {
  task_name: string;
  path: string;
  kind: 'file' | 'tar';
  size: number;
  sha256: string;
  url: string;
}

/**
 * Uploads the task's artifacts: one file as itself, several files or a
 * directory as one tar.gz named after the task. Nothing matched is a note,
 * not a failure; a limit is a StorageError naming it.
 */
export async function uploadArtifacts(ctx: StorageContext, paths: string[]): Promise<void> {
  const files = await findFiles(ctx.workspace, paths);
  if (files.length === 0) {
    ctx.note(`no file matches the artifacts' paths (${paths.join(', ')}): nothing uploaded`);
    return;
  }
  // A copy of the runner's own is what is read from here on (copyOut).
  const copy = await mkdtemp(join(ctx.scratch, 'artifacts-'));
  try {
    await uploadCopy(ctx, files, copy);
  } finally {
    await rm(copy, { recursive: true, force: true });
  }
}

/** uploadArtifacts from the runner's copy of `files`, made in `copy`. */
async function uploadCopy(ctx: StorageContext, files: Found[], copy: string): Promise<void> {
  await copyOut(ctx.workspace, files, copy);
  let file: string;
  let body: { path: string; kind: 'file' | 'tar'; largest?: { path: string; size: number } };
  // One regular file downloads as itself; anything more as one archive.
  if (files.length === 1 && !files[0]!.link) {
    file = join(copy, ...files[0]!.path.split('/'));
    body = { path: files[0]!.path, kind: 'file' };
  } else {
    file = join(ctx.scratch, 'artifacts.tar.gz');
    await pack(copy, files, file);
    const largest = files.reduce((a, b) => (b.size > a.size ? b : a));
    body = {
      path: `${artifactDirName(ctx.task.name)}.tar.gz`,
      kind: 'tar',
      largest: { path: largest.path, size: largest.size },
    };
  }
  const { sha256, size } = await digest(file);
  let begun: { artifact: { id: string }; upload: Upload };
  try {
    const answer = await ctx.client.post(
      taskPath(ctx, 'artifacts'),
      { lease_id: ctx.task.lease_id, ...body, size, sha256 },
      { retryForMs: ctx.retryForMs, signal: ctx.signal },
    );
    begun = answer.body as typeof begun;
  } catch (err) {
    if (err instanceof HttpStatusError && err.status === 413) {
      const message = (err.body as { error?: { message?: string } })?.error?.message ?? err.message;
      throw new StorageError(message);
    }
    throw err;
  }
  const etags = await putParts(ctx.client.url, file, begun.upload, ctx.signal);
  await ctx.client.post(
    taskPath(ctx, `artifacts/${encodeURIComponent(begun.artifact.id)}/commit`),
    { lease_id: ctx.task.lease_id, etags },
    { retryForMs: ctx.retryForMs, signal: ctx.signal },
  );
  ctx.note(
    `uploaded artifact ${body.path} (${size} bytes${body.kind === 'tar' ? `, ${files.length} files` : ''})`,
  );
  // Large archives would otherwise wait for the workspace's removal.
  if (body.kind === 'tar') await rm(file, { force: true });
}

/** The size of a file, or null when there is none. */
export async function fileSize(file: string): Promise<number | null> {
  return stat(file).then(
    (s) => s.size,
    () => null,
  );
}
