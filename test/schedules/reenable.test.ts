// Re-enabling a project opens the idle gate (issue #29 review): a closed gate
// remembers the wake time of the work it last saw, which left out a disabled
// project's schedules, so without this they waited for the weekly backstop sweep.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { updateProject } from '../../lib/app/projects.ts';
import { IdleGate, MemoryGateStore } from '../../lib/idle/gate.ts';
import { createProject } from '../e2e/calls.ts';
import { testStack } from '../helpers/stack.ts';

const stack = await testStack(import.meta.filename);
const ctx = stack.context;

test('enabling a disabled project opens a closed idle gate; other changes leave it closed', async () => {
  await createProject(stack, {
    id: 'back',
    name: 'back',
    forge: 'github',
    repo: 'acme/back',
    repo_url: 'https://github.com/acme/back.git',
  });
  const store = new MemoryGateStore();
  const gate = new IdleGate(store, { cacheMs: 0 });
  store.marker = false;
  await updateProject(ctx.pool, ctx.keyring, 'back', { enabled: false }, undefined, gate);
  assert.equal(store.marker, false, 'disabling opened the gate');
  await updateProject(ctx.pool, ctx.keyring, 'back', { name: 'Back' }, undefined, gate);
  assert.equal(store.marker, false, 'a rename opened the gate');
  await updateProject(ctx.pool, ctx.keyring, 'back', { enabled: true }, undefined, gate);
  assert.equal(store.marker, true, 'enabling the project left the gate closed');
  // Enabling one already enabled changes nothing.
  store.marker = false;
  await updateProject(ctx.pool, ctx.keyring, 'back', { enabled: true }, undefined, gate);
  assert.equal(store.marker, false);
});
