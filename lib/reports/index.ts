// Test reports (docs/pipeline.md#reports-test-results): JUnit XML read
// within bounds, and the rows that keep what it said.

export * from './junit.ts';
export * from './limits.ts';
export * from './rows.ts';
