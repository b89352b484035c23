import assert from 'node:assert/strict';
import { test } from 'node:test';
import { ConfigError, loadConfig } from '../lib/config.ts';

test('defaults apply when nothing is set', () => {
  const config = loadConfig({});
  assert.equal(config.DATABASE_URL, undefined);
  assert.equal(config.CONDUCTOR_DATA_DIR, '.conductor');
  assert.equal(config.CONDUCTOR_DB_POOL_MAX, 10);
  assert.ok(Object.isFrozen(config));
});

test('an empty variable counts as unset', () => {
  assert.equal(loadConfig({ DATABASE_URL: '' }).DATABASE_URL, undefined);
});

test('a bad value fails naming the variable', () => {
  assert.throws(
    () => loadConfig({ DATABASE_URL: 'mysql://x' }),
    (e: unknown) => e instanceof ConfigError && /DATABASE_URL: must be a postgres/.test(e.message),
  );
  assert.throws(() => loadConfig({ CONDUCTOR_DB_POOL_MAX: 'lots' }), /CONDUCTOR_DB_POOL_MAX/);
  assert.throws(() => loadConfig({ CONDUCTOR_DB_POOL_MAX: '0' }), /CONDUCTOR_DB_POOL_MAX/);
});

test('numbers are read from strings', () => {
  assert.equal(loadConfig({ CONDUCTOR_DB_POOL_MAX: '4' }).CONDUCTOR_DB_POOL_MAX, 4);
});

test('prepared statements are on unless set to false; another value names the variable', () => {
  assert.equal(loadConfig({}).CONDUCTOR_DB_PREPARED_STATEMENTS, true);
  assert.equal(
    loadConfig({ CONDUCTOR_DB_PREPARED_STATEMENTS: 'false' }).CONDUCTOR_DB_PREPARED_STATEMENTS,
    false,
  );
  assert.throws(
    () => loadConfig({ CONDUCTOR_DB_PREPARED_STATEMENTS: 'no' }),
    /CONDUCTOR_DB_PREPARED_STATEMENTS: must be true or false/,
  );
});
