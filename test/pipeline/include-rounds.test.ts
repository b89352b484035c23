// Found in review: the files a round of include asks for depend on what the
// earlier rounds brought (a file reached by a shorter path frees the budget a
// deeper one used), so a compile could take more rounds than the depth limit
// and end in an internal error. It is bounded by the files instead, and past
// that bound the job fails naming include, never crashing.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { planPipeline } from '../../lib/app/jobs.ts';

const push = { ref: 'refs/heads/main', event: 'push' as const };
const task = (name: string) => `tasks:\n  ${name}:\n    script: [echo]\n`;

test('includes whose budget frees up in a later round end in a pipeline answer, never an internal error', async () => {
  const repo: Record<string, string> = {
    'a.yml': 'include: [c.yml]\ntasks: {}\n',
    'c.yml': 'include: [b.yml]\ntasks: {}\n',
    'b.yml': `include: [${Array.from({ length: 16 }, (_, i) => `d${i}.yml`).join(', ')}]\n${task('b')}`,
    'z.yml': `include: [w.yml]\n${task('z')}`,
    'w.yml': `include: [v.yml]\n${task('w')}`,
    'v.yml': task('v'),
  };
  for (let i = 0; i < 16; i++) repo[`d${i}.yml`] = task(`d${i}`);
  let reads = 0;
  const plan = await planPipeline(
    `version: 1\ninclude: [a.yml, b.yml, z.yml]\n${task('main')}`,
    push,
    async (path) => {
      reads++;
      return repo[path] ? { text: repo[path]! } : { error: 'missing' };
    },
  );
  // b.yml is reached through a.yml and c.yml before main's own include of it
  // is seen, so its includes count as too deep (an order dependence left for
  // later: docs/limits.md); what matters here is that the compile answers.
  if ('issues' in plan) {
    for (const issue of plan.issues) assert.equal(issue.file, 'b.yml', JSON.stringify(issue));
  } else {
    assert.ok(plan.pipeline.tasks.some((t) => t.name === 'v'));
  }
  assert.ok(reads <= 40, `${reads} files read`);
});
