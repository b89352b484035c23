// A matrix expansion is labelled in the graph as its name says it, keys in
// the order the pipeline wrote them (issue #34). The stored matrix is jsonb,
// whose keys come back in jsonb's own order (shortest first), which the page
// used to show: `os: linux, node: 20` for `test (node: 20, os: linux)`.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { type GraphTask, renderGraph } from '../../lib/pages/graph.ts';

function expansion(node: string, os: string): GraphTask {
  return {
    id: `id-${node}-${os}`,
    name: `test (node: ${node}, os: ${os})`,
    base_name: 'test',
    // As jsonb answers it: the shorter key first.
    matrix: { os, node },
    state: 'queued',
    needs: [],
    attempt: 0,
    max_attempts: 3,
    allow_failure: false,
    error: null,
    started_at: null,
    finished_at: null,
  };
}

test('a matrix expansion is labelled with its keys in the order its name gives them', () => {
  const svg = renderGraph([expansion('20', 'linux'), expansion('22', 'arm')], {
    href: (t) => `#${t.id}`,
  }).toString();
  assert.match(svg, />node: 20, os: linux</);
  assert.match(svg, />node: 22, os: arm</);
  assert.doesNotMatch(svg, /os: linux, node: 20/);
});
