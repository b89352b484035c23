export {
  ChangedMigrationError,
  codeExpectation,
  expectationOf,
  type FunctionFile,
  functionChecksum,
  loadFunctionFiles,
  loadMigrationSet,
  loadMigrations,
  type MigrateResult,
  type Migration,
  MigrationError,
  type MigrationSet,
  migrate,
  migrationChecksum,
  migrationFile,
  type RepairResult,
  repairMigrations,
  type SchemaExpectation,
  schemaStatus,
} from './migrate.ts';
export {
  CALL_BOUNDS,
  createPool,
  isConnectionError,
  isSilence,
  type Pool,
  type PoolConfig,
  type Queryable,
  queryTimeoutFor,
  SESSION_OPTIONS,
  withClient,
} from './pool.ts';
export { RETRYABLE_SQLSTATES, SQLSTATE, sqlState } from './sqlstate.ts';
export {
  prepared,
  type StatementOptions,
  type StatementResult,
  setPreparedStatements,
  statement,
  statementWithStats,
} from './statement.ts';
export {
  type Isolation,
  TransactionConflictError,
  type TransactionOptions,
  type TransactionResult,
  type Tx,
  transaction,
  transactionWithStats,
} from './transaction.ts';
export { asUnavailable, type Unavailability, unavailability } from './unavailable.ts';
