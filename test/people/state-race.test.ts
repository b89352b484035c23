// A sign-in's state is good once, also when the callback comes twice at the
// same moment (a double click, a replayed redirect) with the same sealed
// cookie: starting a sign-in writes nothing, and the callback records the
// state as used with one INSERT ... ON CONFLICT DO NOTHING, so of two
// callbacks that both waited on the table, exactly one signs in. Proven on PostgreSQL with both callbacks held at the
// table until each is visibly waiting, then let go together.
import assert from 'node:assert/strict';
import { after, test } from 'node:test';
import { createPool } from '../../lib/db/index.ts';
import { startE2E } from '../e2e/calls.ts';
import { startFakeOAuth } from '../helpers/fake-oauth.ts';
import { holdTable, untilWaiting } from '../helpers/race.ts';

const oauth = await startFakeOAuth();
const e2e = await startE2E(import.meta.filename, {
  env: {
    CONDUCTOR_GITHUB_CLIENT_ID: oauth.clientId,
    CONDUCTOR_GITHUB_CLIENT_SECRET: oauth.clientSecret,
    CONDUCTOR_GITHUB_OAUTH_URL: oauth.url,
    CONDUCTOR_GITHUB_API_URL: oauth.url,
  },
});
const { stack } = e2e;
const url = stack.context.config.DATABASE_URL!;
const holder = createPool({ url, max: 2, applicationName: 'state-race-holder' });
after(() => holder.end());

async function callbackTwice(): Promise<{ cookie: string; callback: URL }> {
  const start = await fetch(`${stack.url}/login/github`, { redirect: 'manual' });
  const cookie = start.headers.getSetCookie()[0]!.split(';')[0]!;
  const atProvider = await fetch(start.headers.get('location')!, { redirect: 'manual' });
  return { cookie, callback: new URL(atProvider.headers.get('location')!) };
}

const sessionsMade = (answers: Response[]) =>
  answers.filter((r) => r.headers.getSetCookie().some((c) => /^conductor_session=[^;]/.test(c)));

test('two callbacks with one state, both waiting on the table when it is let go: one session', async () => {
  const { cookie, callback } = await callbackTwice();
  const release = await holdTable(holder, 'oauth_states');
  const both = [1, 2].map(() => fetch(callback, { headers: { cookie }, redirect: 'manual' }));
  try {
    await untilWaiting(holder, { url, applicationName: 'conductor' }, 2);
  } finally {
    await release();
  }
  const answers = await Promise.all(both);
  assert.deepEqual(answers.map((r) => r.status).sort(), [200, 400]);
  assert.equal(sessionsMade(answers).length, 1);
});

test('eight callbacks with one state at once: one session', async () => {
  const { cookie, callback } = await callbackTwice();
  const answers = await Promise.all(
    Array.from({ length: 8 }, () => fetch(callback, { headers: { cookie }, redirect: 'manual' })),
  );
  assert.equal(answers.filter((r) => r.status === 200).length, 1);
  assert.equal(answers.filter((r) => r.status === 400).length, 7);
  assert.equal(sessionsMade(answers).length, 1);
});
