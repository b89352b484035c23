import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { findCycles, withDependents } from '../../lib/pipeline/graph.ts';

const graph = (edges: Record<string, string[]>) => new Map(Object.entries(edges));

describe('findCycles', () => {
  test('an acyclic graph has no cycles', () => {
    const g = graph({ a: [], b: ['a'], c: ['a', 'b'] });
    assert.deepEqual(findCycles(['a', 'b', 'c'], g), []);
  });

  test('a cycle is named once, starting at its first member in file order', () => {
    const g = graph({ x: [], c: ['a'], a: ['b'], b: ['c'] });
    assert.deepEqual(findCycles(['x', 'c', 'a', 'b'], g), [['c', 'a', 'b', 'c']]);
  });

  test('a group of tasks tangled in several cycles is named by one shortest cycle', () => {
    const g = graph({ a: ['b', 'c'], b: ['a'], c: ['a'] });
    assert.deepEqual(findCycles(['a', 'b', 'c'], g), [['a', 'b', 'a']]);
  });

  test('separate cycles are each named, in file order', () => {
    const g = graph({ d: ['e'], e: ['d'], a: ['b'], b: ['a'] });
    assert.deepEqual(findCycles(['a', 'b', 'd', 'e'], g), [
      ['a', 'b', 'a'],
      ['d', 'e', 'd'],
    ]);
  });

  test('a chain of thousands of tasks does not overflow the stack', () => {
    const order = Array.from({ length: 50_000 }, (_, i) => `t${i}`);
    const g = new Map(order.map((node, i) => [node, [`t${(i + 1) % order.length}`]]));
    const [cycle] = findCycles(order, g);
    assert.equal(cycle?.length, 50_001);
    assert.equal(cycle?.[0], 't0');
  });
});

describe('withDependents', () => {
  test('takes along every task that needs a left-out task, directly or not', () => {
    const g = graph({ build: [], publish: ['build'], announce: ['publish'], docs: ['build'] });
    assert.deepEqual([...withDependents(['publish'], g)].sort(), ['announce', 'publish']);
    assert.deepEqual([...withDependents(['build'], g)].sort(), [
      'announce',
      'build',
      'docs',
      'publish',
    ]);
    assert.deepEqual([...withDependents([], g)], []);
  });
});
