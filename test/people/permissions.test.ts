// The table (#31), held to the code: what each forge permission lets
// a person do.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { ACTIONS, permits } from '../../lib/people/permissions.ts';

test('read views; write reruns, cancels, approves, unblocks, runs and sees the settings page; admin also changes settings, secrets, schedules and workers', () => {
  const allowed = (permission: 'none' | 'read' | 'write' | 'admin') =>
    ACTIONS.filter((a) => permits(permission, a));
  assert.deepEqual(allowed('none'), []);
  assert.deepEqual(allowed('read'), ['view']);
  assert.deepEqual(allowed('write'), [
    'view',
    'rerun',
    'cancel',
    'approve',
    'unblock',
    'run',
    'see_settings',
  ]);
  assert.deepEqual(allowed('admin'), [...ACTIONS]);
  assert.deepEqual(
    ACTIONS.filter((a) => !permits('write', a)),
    ['settings', 'secrets', 'schedules', 'workers'],
  );
});
