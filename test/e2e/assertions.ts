// Assertions on what the API answers: the contract's error shape and the
// shapes of its Job, TaskView and Task.
import assert from 'node:assert/strict';
import type { Json, Reply } from './calls.ts';

/** The contract's error shape with this status and code. */
export function assertError(res: Reply, status: number, code: string): void {
  assert.equal(res.status, status, `expected ${status}, got ${res.status}: ${res.text}`);
  assert.ok(res.body && typeof res.body.error === 'object', `no error object: ${res.text}`);
  assert.equal(res.body.error.code, code);
  assert.equal(typeof res.body.error.message, 'string');
  assert.ok(res.body.error.message.length > 0);
  assert.equal(typeof res.body.error.request_id, 'string');
  assert.ok(res.body.error.request_id.length > 0);
}

export function assertUnauthorized(res: Reply): void {
  assertError(res, 401, 'unauthorized');
}

/** A 400 whose message or one of whose `issues` names `field`. */
export function assertBadRequest(res: Reply, field?: string): void {
  assertError(res, 400, 'bad_request');
  if (field === undefined) return;
  const issues: { path: string; message: string }[] = res.body.error.issues ?? [];
  const named =
    res.body.error.message.includes(field) ||
    issues.some((i) => i.path === field || i.path.split('.').includes(field));
  assert.ok(named, `the 400 does not name ${field}: ${res.text}`);
}

/** An ISO-8601 UTC time string. */
export function assertTime(value: unknown, what = 'time'): void {
  assert.equal(typeof value, 'string', `${what} is not a string: ${JSON.stringify(value)}`);
  assert.match(value as string, /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d+)?Z$/, what);
}

/** Every field the contract lists for a Job, with its type. */
export function assertJobShape(job: Record<string, Json>): void {
  for (const field of [
    'id',
    'project_id',
    'number',
    'state',
    'trigger',
    'ref',
    'sha',
    'trusted',
    'rerun_of',
    'error',
    'errors',
    'created_at',
    'started_at',
    'finished_at',
  ]) {
    assert.ok(field in job, `Job has no ${field}: ${JSON.stringify(job)}`);
  }
  assert.equal(typeof job.number, 'number');
  assert.ok(
    ['pending', 'blocked', 'running', 'success', 'failed', 'cancelled'].includes(job.state),
  );
  assert.ok(['push', 'tag', 'pull_request', 'manual', 'rerun'].includes(job.trigger));
  assert.equal(typeof job.trusted, 'boolean');
  assertTime(job.created_at, 'created_at');
  if (job.started_at !== null) assertTime(job.started_at, 'started_at');
  if (job.finished_at !== null) assertTime(job.finished_at, 'finished_at');
}

/** Every field the contract lists for a TaskView. */
export function assertTaskViewShape(task: Record<string, Json>): void {
  for (const field of [
    'id',
    'name',
    'base_name',
    'matrix',
    'state',
    'needs',
    'attempt',
    'max_attempts',
    'allow_failure',
    'exit_code',
    'error',
    'outputs',
    'started_at',
    'finished_at',
  ]) {
    assert.ok(field in task, `TaskView has no ${field}: ${JSON.stringify(task)}`);
  }
  assert.ok(
    ['waiting', 'queued', 'running', 'success', 'failed', 'skipped', 'cancelled'].includes(
      task.state,
    ),
  );
  assert.equal(typeof task.attempt, 'number');
  assert.equal(typeof task.max_attempts, 'number');
  assert.ok(Array.isArray(task.needs));
}

/** Every field the contract lists for a Task handed to a runner. */
export function assertTaskShape(task: Record<string, Json>): void {
  for (const field of [
    'id',
    'job_id',
    'name',
    'lease_id',
    'attempt',
    'max_attempts',
    'lease_expires_at',
    'image',
    'script',
    'env',
    'secrets',
    'matrix',
    'needs_outputs',
    'timeout_s',
    'repo',
  ]) {
    assert.ok(field in task, `Task has no ${field}: ${JSON.stringify(task)}`);
  }
  assert.equal(typeof task.attempt, 'number');
  assert.equal(typeof task.max_attempts, 'number');
  assert.equal(typeof task.timeout_s, 'number');
  assertTime(task.lease_expires_at, 'lease_expires_at');
  assert.ok(task.image === null || typeof task.image === 'string');
  assert.ok(Array.isArray(task.script));
  for (const key of ['url', 'sha', 'ref']) assert.equal(typeof task.repo[key], 'string');
}
