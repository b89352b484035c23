// Settings added or completed for #33, kept apart from context.test.ts (the
// messages of bad values are tested there).
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { contextFromArgs, propsFromContext } from '../../infra/context.ts';
import { SETTING_DEFAULTS } from '../../infra/defaults.ts';

const fromArgs = (...args: string[]) => {
  const context = contextFromArgs(args);
  return propsFromContext((key) => context[key]);
};

test('publicUrl takes an https URL, with or without a path, for the job links in commit statuses', () => {
  assert.equal(
    fromArgs('-c', 'publicUrl=https://ci.example').props.publicUrl,
    'https://ci.example',
  );
  assert.equal(
    fromArgs('-c', 'publicUrl=https://example.com/ci/').props.publicUrl,
    'https://example.com/ci/',
  );
  assert.equal(fromArgs().props.publicUrl, undefined);
  // Signed links over plain http would show their signature to the network.
  assert.throws(() => fromArgs('-c', 'publicUrl=http://ci.example'), /publicUrl[\s\S]*https:\/\//);
  assert.throws(() => fromArgs('-c', 'publicUrl=ci.example'), /publicUrl/);
  assert.throws(
    () => fromArgs('-c', 'publicUrl=https://ci.example/#top'),
    /publicUrl[\s\S]*fragment/,
  );
});

test('one of the throttle settings alone keeps the default of the other', () => {
  assert.deepEqual(fromArgs('-c', 'throttleRate=10').props.throttle, {
    rate: 10,
    burst: SETTING_DEFAULTS.throttleBurst,
  });
  assert.deepEqual(fromArgs('-c', 'throttleBurst=7').props.throttle, {
    rate: SETTING_DEFAULTS.throttleRate,
    burst: 7,
  });
});
