// Which store a deployment uses: S3 when a bucket is configured, else a
// directory under the data directory, signed with a key derived from the
// app's sealing key. Built once per container. The S3 store (and the
// runtime's SDK under it) is an `import()` at its first call, so no
// function's cold start loads it (docs/architecture.md, "Bundles").
import { join } from 'node:path';
import type { Config } from '../config.ts';
import type { Keyring } from '../secrets.ts';
import { LocalStore } from './local.ts';
import type { S3Store } from './s3.ts';
import type { BlobStore } from './store.ts';

/** The S3 store, loaded by its first call. */
function lazyS3Store(bucket: string): BlobStore {
  let store: Promise<S3Store> | undefined;
  const s3 = () => {
    store ??= import('./s3.ts').then((m) => new m.S3Store({ bucket }));
    return store;
  };
  return {
    kind: 's3',
    createUpload: async (...a) => (await s3()).createUpload(...a),
    partUrls: async (...a) => (await s3()).partUrls(...a),
    finishUpload: async (...a) => (await s3()).finishUpload(...a),
    size: async (...a) => (await s3()).size(...a),
    downloadUrl: async (...a) => (await s3()).downloadUrl(...a),
    read: async (...a) => (await s3()).read(...a),
    delete: async (...a) => (await s3()).delete(...a),
  };
}

let configured: BlobStore | undefined;

/** The store `given` (a context's), else the configured one. */
export function storeFor(
  given: BlobStore | undefined,
  config: Pick<Config, 'CONDUCTOR_ARTIFACTS_BUCKET' | 'CONDUCTOR_DATA_DIR'>,
  keyring: Keyring,
): BlobStore {
  if (given) return given;
  if (!configured) {
    const bucket = config.CONDUCTOR_ARTIFACTS_BUCKET;
    configured = bucket
      ? lazyS3Store(bucket)
      : new LocalStore(
          join(config.CONDUCTOR_DATA_DIR, 'artifacts'),
          keyring.keys.get(keyring.primaryId)!,
        );
  }
  return configured;
}
