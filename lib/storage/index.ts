// Artifacts and caches: one store interface with two implementations (S3, a
// local directory), the metadata rows, the cache scopes and the limits.
// S3Store is imported from ./s3.ts itself: a function loads it (and the AWS
// SDK) only when storeFor's store is first called (factory.ts).

export { storeFor } from './factory.ts';
export * from './limits.ts';
export { BLOB_PATH, GrantError, LocalStore } from './local.ts';
export * from './rows.ts';
export { DEFAULT_BRANCH_REF, isTrustedScope, readScopes, writeScope } from './scope.ts';
export * from './store.ts';
