// Caches on the runner (docs/artifacts.md): `{{ hash 'file' }}` in a key is
// filled in from the checkout; before the script each cache is restored
// (an exact hit, a restore key's prefix, or a miss, said in the log); after
// a successful script each is saved, unless its key was an exact hit. A
// cache that cannot be restored or saved is a note in the log: the task
// goes on, as it would with a miss.
import { createHash } from 'node:crypto';
import { mkdtemp, realpath, rm } from 'node:fs/promises';
import { join } from 'node:path';
import {
  copyOut,
  digest,
  download,
  findFiles,
  openInside,
  pack,
  putParts,
  type StorageContext,
  StorageError,
  type Upload,
  unpack,
} from './artifacts.ts';
import type { Task } from './protocol.ts';

const HASH_TEMPLATE = /\{\{\s*hash((?:\s+'[^']+')+)\s*\}\}/g;

/**
 * A cache key with each `{{ hash 'a' 'b' }}` replaced by the SHA-256 of
 * those files in the checkout (their names and contents, in order). A file
 * that is not there, or not a regular file, is an error naming it.
 */
export async function fillKey(key: string, workspace: string): Promise<string> {
  let out = '';
  let last = 0;
  for (const match of key.matchAll(HASH_TEMPLATE)) {
    out += key.slice(last, match.index);
    last = (match.index ?? 0) + match[0].length;
    const files = [...(match[1] ?? '').matchAll(/'([^']+)'/g)].map((m) => m[1]!);
    const hash = createHash('sha256');
    for (const file of files) {
      if (file.startsWith('/') || file.split('/').includes('..')) {
        throw new StorageError(`hash '${file}': the file must be in the checkout`);
      }
      // Read through a checked descriptor (openInside), as an upload is, and
      // one answer for every file that is not there (a link to a root-only
      // host directory must not tell which names exist in it).
      const handle = await openInside(workspace, await realpath(workspace), file).catch(() => {
        throw new StorageError(`hash '${file}': no regular file there inside the checkout`);
      });
      try {
        const size = (await handle.stat()).size;
        const inner = createHash('sha256');
        if (size > 0) {
          for await (const chunk of handle.createReadStream({
            autoClose: false,
            start: 0,
            end: size - 1,
          })) {
            inner.update(chunk as Buffer);
          }
        }
        hash.update(`${file}\0`);
        hash.update(inner.digest());
      } finally {
        await handle.close();
      }
    }
    out += hash.digest('hex');
  }
  return out + key.slice(last);
}

type CacheSpec = NonNullable<Task['caches']>[number];

/** What a restore found, kept for the save after the script. */
interface Restored {
  spec: CacheSpec;
  key: string;
  hit: boolean;
}

/** Restores and saves one task's caches. */
export class TaskCaches {
  private restored: Restored[] = [];

  constructor(private readonly ctx: StorageContext) {}

  /** Restores each cache whose policy pulls; notes a hit, a restore-key hit or a miss with bytes. */
  async restore(): Promise<void> {
    const { ctx } = this;
    for (const spec of ctx.task.caches ?? []) {
      let key: string;
      try {
        key = await fillKey(spec.key, ctx.workspace);
      } catch (err) {
        ctx.note(`cache ${spec.key}: ${(err as Error).message}; not restored or saved`);
        continue;
      }
      if (spec.policy === 'push') {
        this.restored.push({ spec, key, hit: false });
        continue;
      }
      try {
        const restoreKeys = await Promise.all(
          spec.restore_keys.map((k) => fillKey(k, ctx.workspace)),
        );
        const answer = await ctx.client.post(
          `/v1/runner/tasks/${encodeURIComponent(ctx.task.id)}/caches/restore`,
          { lease_id: ctx.task.lease_id, key, restore_keys: restoreKeys },
          { retryForMs: ctx.retryForMs, signal: ctx.signal },
        );
        const found = answer.body as {
          result: string;
          key: string | null;
          size: number;
          /** Absent from a control plane older than the check. */
          sha256?: string | null;
          url: string | null;
        };
        if (!found.url || found.result === 'miss') {
          ctx.note(`cache miss: ${key}`);
          this.restored.push({ spec, key, hit: false });
          continue;
        }
        const temp = join(ctx.scratch, 'cache-restore.tar.gz');
        const sha = await download(ctx.client.url, found.url, temp, ctx.signal);
        // Damaged or replaced in the store: a miss, never unpacked.
        if (found.sha256 && sha !== found.sha256) {
          await rm(temp, { force: true });
          throw new StorageError(
            `the entry ${found.key} arrived damaged (its sha256 differs from the one saved)`,
          );
        }
        await unpack(temp, ctx.workspace);
        await rm(temp, { force: true });
        const hit = found.result === 'hit';
        ctx.note(
          hit
            ? `cache hit: ${key} (${found.size} bytes restored)`
            : `cache restored from restore key: ${found.key} for ${key} (${found.size} bytes restored)`,
        );
        this.restored.push({ spec, key, hit });
      } catch (err) {
        if (ctx.signal.aborted) throw err;
        ctx.note(
          `cache ${key} could not be restored: ${(err as Error).message}; going on without it`,
        );
        this.restored.push({ spec, key, hit: false });
      }
    }
  }

  /** Saves each cache whose policy pushes and whose key was not an exact hit. */
  async save(): Promise<void> {
    const { ctx } = this;
    for (const { spec, key, hit } of this.restored) {
      if (spec.policy === 'pull') continue;
      if (hit) {
        ctx.note(`cache ${key} was a hit: not saved again`);
        continue;
      }
      try {
        await this.saveOne(spec, key);
      } catch (err) {
        if (ctx.signal.aborted) throw err;
        ctx.note(`cache ${key} could not be saved: ${(err as Error).message}`);
      }
    }
  }

  private async saveOne(spec: CacheSpec, key: string): Promise<void> {
    const { ctx } = this;
    const files = await findFiles(ctx.workspace, spec.paths);
    if (files.length === 0) {
      ctx.note(`cache ${key}: no file matches its paths (${spec.paths.join(', ')}); not saved`);
      return;
    }
    const file = join(ctx.scratch, 'cache-save.tar.gz');
    // Archived from the runner's own copy (copyOut), as artifacts are.
    const copy = await mkdtemp(join(ctx.scratch, 'cache-'));
    try {
      await copyOut(ctx.workspace, files, copy);
      await pack(copy, files, file);
    } finally {
      await rm(copy, { recursive: true, force: true });
    }
    const { sha256, size } = await digest(file);
    const base = `/v1/runner/tasks/${encodeURIComponent(ctx.task.id)}/caches`;
    const answer = await ctx.client.post(
      `${base}/save`,
      { lease_id: ctx.task.lease_id, key, size, sha256 },
      { retryForMs: ctx.retryForMs, signal: ctx.signal },
    );
    const saved = answer.body as {
      skipped?: string;
      cache_id?: string;
      scope?: string;
      upload?: Upload;
    };
    if (saved.skipped || !saved.cache_id || !saved.upload) {
      ctx.note(`cache ${key} not saved: ${saved.skipped ?? 'the control plane gave no upload'}`);
      await rm(file, { force: true });
      return;
    }
    const etags = await putParts(ctx.client.url, file, saved.upload, ctx.signal);
    const committed = await ctx.client.post(
      `${base}/${encodeURIComponent(saved.cache_id)}/commit`,
      { lease_id: ctx.task.lease_id, etags },
      { retryForMs: ctx.retryForMs, signal: ctx.signal },
    );
    await rm(file, { force: true });
    if ((committed.body as { evicted?: boolean }).evicted) {
      ctx.note(
        `cache ${key} not kept: the project's cache quota is held by trusted entries, which an untrusted job's save never evicts`,
      );
      return;
    }
    ctx.note(`cache saved: ${key} (${size} bytes, ${files.length} files) in ${saved.scope}`);
  }
}
