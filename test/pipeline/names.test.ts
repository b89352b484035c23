import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { envFragment } from '../../lib/pipeline/index.ts';
import { cartesian, matrixTaskName } from '../../lib/pipeline/names.ts';

describe('envFragment', () => {
  test('upper-cases and turns every other run of characters into one underscore', () => {
    assert.equal(envFragment('test (node: 20, os: linux)'), 'TEST_NODE_20_OS_LINUX');
    assert.equal(envFragment('build-app'), 'BUILD_APP');
    assert.equal(envFragment('build_app'), 'BUILD_APP');
    assert.equal(envFragment('a..b--c'), 'A_B_C');
    assert.equal(envFragment('v1.2'), 'V1_2');
  });

  test('trims underscores from both ends', () => {
    assert.equal(envFragment('_private_'), 'PRIVATE');
    assert.equal(envFragment('(x)'), 'X');
    assert.equal(envFragment('__'), '');
  });
});

describe('matrix names', () => {
  test('an expansion is named by its base name and its values, keys in file order', () => {
    assert.equal(
      matrixTaskName('test', [
        ['node', '20'],
        ['os', 'linux'],
      ]),
      'test (node: 20, os: linux)',
    );
  });

  test('the cartesian product varies the first key slowest', () => {
    assert.deepEqual(
      cartesian([
        ['a', ['1', '2']],
        ['b', ['x', 'y', 'z']],
      ]).map((combo) => combo.map(([, value]) => value).join('')),
      ['1x', '1y', '1z', '2x', '2y', '2z'],
    );
    assert.deepEqual(cartesian([]), [[]]);
  });
});
