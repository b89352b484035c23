// When a schedule fires (lib/schedules/cron.ts): cron expressions in IANA
// time zones across daylight-saving changes, the latest of missed ticks, and
// the jitter. Pure: every time is the test's.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import {
  cronProblem,
  jitterSeconds,
  latestTick,
  MAX_JITTER_S,
  nextDue,
  nextTick,
  timezoneProblem,
} from '../../lib/schedules/cron.ts';

const at = (iso: string) => new Date(iso);
const iso = (d: Date | null) => d?.toISOString() ?? null;

test('a time the spring-forward skips fires at the next valid time, once', () => {
  // 2026-03-08 in New York: 02:00 EST jumps to 03:00 EDT; 02:30 does not exist.
  const first = nextTick('30 2 * * *', 'America/New_York', at('2026-03-07T12:00:00Z'));
  assert.equal(iso(first), '2026-03-08T07:00:00.000Z', '03:00 EDT, the first valid time after');
  const second = nextTick('30 2 * * *', 'America/New_York', first!);
  assert.equal(iso(second), '2026-03-09T06:30:00.000Z', 'the next day at 02:30 EDT');
});

test('a time the fall-back repeats fires once', () => {
  // 2026-11-01 in New York: 01:00-02:00 happens twice (EDT, then EST).
  const first = nextTick('30 1 * * *', 'America/New_York', at('2026-10-31T12:00:00Z'));
  assert.equal(iso(first), '2026-11-01T05:30:00.000Z', '01:30 EDT');
  const second = nextTick('30 1 * * *', 'America/New_York', first!);
  assert.equal(iso(second), '2026-11-02T06:30:00.000Z', 'not 01:30 EST an hour later');
});

test('an hourly schedule in Europe/Berlin keeps firing on the hour through the change', () => {
  let t = at('2026-03-29T00:30:00Z');
  const ticks: string[] = [];
  for (let i = 0; i < 3; i++) {
    t = nextTick('0 * * * *', 'Europe/Berlin', t)!;
    ticks.push(t.toISOString());
  }
  assert.deepEqual(ticks, [
    '2026-03-29T01:00:00.000Z',
    '2026-03-29T02:00:00.000Z',
    '2026-03-29T03:00:00.000Z',
  ]);
});

test('of missed ticks, latestTick answers the latest only', () => {
  const since = at('2026-01-01T00:00:00Z');
  assert.equal(
    iso(latestTick('0 * * * *', 'UTC', since, at('2026-01-01T05:30:00Z'))),
    '2026-01-01T05:00:00.000Z',
  );
  assert.equal(latestTick('0 * * * *', 'UTC', since, at('2026-01-01T00:59:00Z')), null);
  // A schedule every minute that missed a month still answers, bounded.
  assert.equal(
    iso(latestTick('* * * * *', 'UTC', since, at('2026-02-01T00:00:30Z'))),
    '2026-02-01T00:00:00.000Z',
  );
});

test('latestTick finds the latest tick however long the gap: @monthly after four months, @weekly after three weeks', () => {
  // Before: only 10,000 minutes were searched, none was found, and the
  // caller fired the oldest missed tick, then the next one, once per tick.
  assert.equal(
    iso(latestTick('@monthly', 'UTC', at('2026-01-31T23:59:59Z'), at('2026-06-15T12:00:45Z'))),
    '2026-06-01T00:00:00.000Z',
  );
  // @weekly is Sundays 00:00; back on Saturday 27 June, half an hour before the next.
  assert.equal(
    iso(latestTick('@weekly', 'UTC', at('2026-06-06T23:59:59Z'), at('2026-06-27T23:30:45Z'))),
    '2026-06-21T00:00:00.000Z',
  );
  // A tick exactly at `now` counts; one at `since` does not.
  assert.equal(
    iso(latestTick('0 * * * *', 'UTC', at('2026-01-01T00:00:00Z'), at('2026-01-01T05:00:00Z'))),
    '2026-01-01T05:00:00.000Z',
  );
  assert.equal(
    latestTick('0 * * * *', 'UTC', at('2026-01-01T05:00:00Z'), at('2026-01-01T05:00:00Z')),
    null,
  );
});

test('latestTick of an every-minute schedule after a week away is cheap (the sweep pays it per due schedule)', () => {
  const t0 = performance.now();
  for (let i = 0; i < 50; i++) {
    assert.equal(
      iso(latestTick('* * * * *', 'UTC', at('2026-06-01T00:00:00Z'), at('2026-06-10T00:00:30Z'))),
      '2026-06-10T00:00:00.000Z',
    );
  }
  const ms = performance.now() - t0;
  // Fifty due schedules: was about 0.8 s each (10,000 steps); now far under.
  assert.ok(ms < 500, `50 look-ups took ${ms.toFixed(0)} ms`);
});

test('latestTick agrees with nextTick across DST: the skipped and the repeated hour', () => {
  // Europe/Berlin: 02:30 is skipped on 29 March (fires 03:00 CEST = 01:00Z)
  // and repeated on 25 October (fires once).
  for (const now of ['2026-03-29T04:00:00Z', '2026-10-25T04:00:00Z']) {
    const latest = latestTick('30 2 * * *', 'Europe/Berlin', at('2026-03-01T00:00:00Z'), at(now));
    assert.ok(latest);
    const day = new Date(latest.getTime() - 20 * 3_600_000);
    assert.equal(iso(nextTick('30 2 * * *', 'Europe/Berlin', day)), iso(latest), now);
  }
});

test('cron expressions: five fields or a shortcut, each problem named', () => {
  assert.equal(cronProblem('0 3 * * *'), null);
  assert.equal(cronProblem('@daily'), null);
  assert.equal(cronProblem('@hourly'), null);
  assert.match(cronProblem('0 0 3 * * *') ?? '', /must have 5 fields/);
  assert.match(cronProblem('61 * * * *') ?? '', /minute/);
  assert.match(cronProblem('@reboot') ?? '', /not one of @hourly, @daily, @weekly, @monthly/);
  assert.equal(
    nextTick('@daily', 'UTC', at('2026-01-01T10:00:00Z'))?.toISOString(),
    '2026-01-02T00:00:00.000Z',
  );
});

test('time zones: IANA names only', () => {
  assert.equal(timezoneProblem('Europe/Berlin'), null);
  assert.equal(timezoneProblem('UTC'), null);
  assert.match(timezoneProblem('Mars/Olympus') ?? '', /not an IANA time zone/);
});

test('jitter is the same for a schedule every time, below the bound, and spread across schedules', () => {
  assert.equal(jitterSeconds('p', 'nightly'), jitterSeconds('p', 'nightly'));
  const values = new Set<number>();
  for (let i = 0; i < 200; i++) {
    const j = jitterSeconds('p', `s${i}`);
    assert.ok(j >= 0 && j < MAX_JITTER_S);
    values.add(j);
  }
  assert.ok(values.size > MAX_JITTER_S / 2, `200 schedules take ${values.size} distinct offsets`);
  const due = nextDue(
    { cron: '0 * * * *', timezone: 'UTC', projectId: 'p', name: 'nightly' },
    at('2026-01-01T00:10:00Z'),
  )!;
  assert.equal(due.tick.toISOString(), '2026-01-01T01:00:00.000Z');
  assert.equal(due.dueAt.getTime() - due.tick.getTime(), jitterSeconds('p', 'nightly') * 1000);
});
