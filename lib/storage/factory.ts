// Which store a deployment uses: S3 when a bucket is configured, else a
// directory under the data directory, signed with a key derived from the
// app's sealing key. Built once per container.
import { join } from 'node:path';
import type { Config } from '../config.ts';
import type { Keyring } from '../secrets.ts';
import { LocalStore } from './local.ts';
import { S3Store } from './s3.ts';
import type { BlobStore } from './store.ts';

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
      ? new S3Store({ bucket })
      : new LocalStore(
          join(config.CONDUCTOR_DATA_DIR, 'artifacts'),
          keyring.keys.get(keyring.primaryId)!,
        );
  }
  return configured;
}
