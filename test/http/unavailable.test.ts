// Every failure that passes answers 503 unavailable with Retry-After (the
// contract's Additions), never a 500: a runner retries a 503, and a 500 under
// a storm of lock waits or lost connections would only be noise. The real
// failures (a held lock, a cancelled backend, a frozen network) are forced in
// test/e2e/network-*.test.ts; here each class is one error object through the
// real middy handler.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import type { Context } from 'aws-lambda';
import { TransactionConflictError } from '../../lib/db/index.ts';
import { ConflictError } from '../../lib/errors.ts';
import { type HttpEvent, httpFunction } from '../../lib/http/index.ts';
import { setQuiet } from '../../lib/log.ts';

setQuiet(process.env.CONDUCTOR_TEST_LOGS !== '1');

const coded = (message: string, code: string) => Object.assign(new Error(message), { code });
const LAMBDA = { getRemainingTimeInMillis: () => 20_000 } as unknown as Context;

async function answer(err: unknown) {
  const handler = httpFunction(async () => {
    throw err;
  });
  const res = await handler({ headers: {} } as HttpEvent, LAMBDA);
  return {
    status: res.statusCode,
    retryAfter: res.headers?.['retry-after'],
    body: JSON.parse(String(res.body)),
  };
}

const PASSING: Array<[string, unknown, string]> = [
  ['a lock timeout (55P03)', coded('canceling statement due to lock timeout', '55P03'), '1'],
  [
    'a statement timeout (57014)',
    coded('canceling statement due to statement timeout', '57014'),
    '1',
  ],
  [
    'a terminated backend (57P01)',
    coded('terminating connection due to administrator command', '57P01'),
    '1',
  ],
  ['a connection that ended', new Error('Connection terminated unexpectedly'), '1'],
  ['a reset socket', coded('read ECONNRESET', 'ECONNRESET'), '1'],
  ['a query with no reply within query_timeout', new Error('Query read timeout'), '5'],
  ['a connect that timed out', new Error('timeout exceeded when trying to connect'), '5'],
  ['no connection slot left (53300)', coded('sorry, too many clients already', '53300'), '5'],
  [
    'a conflict past its retries',
    new TransactionConflictError(5, coded('could not serialize access', '40001')),
    '1',
  ],
  [
    'a lock timeout wrapped by the code that met it',
    new Error('could not finish the follow-up', {
      cause: coded('canceling statement due to lock timeout', '55P03'),
    }),
    '1',
  ],
];

for (const [what, err, retryAfter] of PASSING) {
  test(`${what} answers 503 unavailable with Retry-After: ${retryAfter}`, async () => {
    const res = await answer(err);
    assert.equal(res.status, 503);
    assert.equal(res.body.error.code, 'unavailable');
    assert.match(res.body.error.message, /try again/);
    assert.equal(res.retryAfter, retryAfter);
  });
}

test('the early timeout of a Lambda about to run out of time answers 503 with Retry-After', async () => {
  const handler = httpFunction(() => new Promise(() => {}));
  const context = { getRemainingTimeInMillis: () => 1_600 } as unknown as Context;
  const res = await handler({ headers: {} } as HttpEvent, context);
  assert.equal(res.statusCode, 503);
  assert.equal(JSON.parse(String(res.body)).error.code, 'unavailable');
  assert.equal(res.headers?.['retry-after'], '5');
});

test('a failure that does not pass is still a 500 without Retry-After, and a conflict still a 409', async () => {
  const broken = await answer(new Error('a bug'));
  assert.equal(broken.status, 500);
  assert.equal(broken.body.error.code, 'internal');
  assert.equal(broken.retryAfter, undefined);
  const stale = await answer(new ConflictError('the lease moved on'));
  assert.equal(stale.status, 409);
  assert.equal(stale.retryAfter, undefined);
});
