// What a logged failure carries, locally and in Lambda, and what a request
// that runs out of Lambda time answers.
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { test } from 'node:test';
import type { Context } from 'aws-lambda';
import { type HttpEvent, httpFunction } from '../../lib/http/index.ts';
import { describeError } from '../../lib/log.ts';

test('a logged error carries its stack and its chain of causes', () => {
  const root = Object.assign(new Error('connect ECONNREFUSED 127.0.0.1:5432'), {
    code: 'ECONNREFUSED',
  });
  const err = new Error('could not read the pipeline file', { cause: root });
  const d = describeError(err);
  assert.equal(d.message, 'could not read the pipeline file');
  assert.match(String(d.stack), /logging\.test\.ts/);
  const cause = d.cause as Record<string, unknown>;
  assert.equal(cause.message, 'connect ECONNREFUSED 127.0.0.1:5432');
  assert.equal(cause.code, 'ECONNREFUSED');
  assert.match(String(cause.stack), /Error: connect ECONNREFUSED/);
});

// In Lambda (AWS_LAMBDA_FUNCTION_NAME set) the lines go through Powertools
// Logger; run in a child process so the module reads that environment.
test('in Lambda a 500 is logged through Powertools with the function, the request id, the stack and the cause', () => {
  const script = `
    import { httpFunction } from './lib/http/index.ts';
    const handler = httpFunction(async () => {
      throw new Error('the statement failed', { cause: new Error('deadlock detected') });
    });
    const context = {
      functionName: 'conductor-api', functionVersion: '$LATEST', memoryLimitInMB: '512',
      invokedFunctionArn: 'arn:aws:lambda:eu-west-1:123456789012:function:conductor-api',
      awsRequestId: 'c0ffee00-0000-4000-8000-000000000001',
      getRemainingTimeInMillis: () => 20_000,
    };
    const res = await handler({ requestContext: { requestId: 'req-1' }, headers: {} }, context);
    console.error('STATUS ' + res.statusCode);
  `;
  const child = spawnSync(
    process.execPath,
    ['--import', 'tsx', '--input-type=module', '-e', script],
    {
      cwd: new URL('../..', import.meta.url).pathname,
      env: {
        ...process.env,
        AWS_LAMBDA_FUNCTION_NAME: 'conductor-api',
        POWERTOOLS_LOG_LEVEL: 'INFO',
      },
      encoding: 'utf8',
    },
  );
  assert.match(child.stderr, /STATUS 500/, child.stderr);
  // Powertools writes errors to stderr and the rest to stdout.
  const lines = `${child.stdout}\n${child.stderr}`
    .split('\n')
    .filter((l) => l.startsWith('{'))
    .map((l) => JSON.parse(l) as Record<string, unknown>);
  const failed = lines.find((l) => l.message === 'request failed');
  assert.ok(failed, `a 'request failed' line in ${child.stdout}${child.stderr}`);
  assert.equal(failed.function_name, 'conductor-api');
  assert.equal(failed.function_request_id, 'c0ffee00-0000-4000-8000-000000000001');
  assert.equal(typeof failed.cold_start, 'boolean');
  assert.equal(failed.request_id, 'req-1');
  const error = failed.error as Record<string, unknown>;
  assert.equal(error.message, 'the statement failed');
  assert.match(String(error.stack), /Error: the statement failed/);
  assert.equal((error.cause as Record<string, unknown>).message, 'deadlock detected');
});

test('a request about to run out of Lambda time answers a JSON 503 instead of timing out', async () => {
  const handler = httpFunction(() => new Promise(() => {}));
  const context = { getRemainingTimeInMillis: () => 1_600 } as unknown as Context;
  const res = await handler({ headers: {} } as HttpEvent, context);
  assert.equal(res.statusCode, 503);
  const body = JSON.parse(String(res.body));
  assert.equal(body.error.code, 'unavailable');
  assert.match(body.error.message, /ran out of time/);
});
