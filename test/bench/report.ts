// Turns the measurements into the markdown report and the SVG chart.
import type {
  CycleResult,
  EmptyClaims,
  EmptyWal,
  GroupCost,
  Latency,
  LostRunner,
  TakeoverCost,
  WebhookLatency,
} from './conductor.ts';
import type { PageRender } from './pages.ts';
import type { PickupLatency } from './pickup.ts';
import type { PoolPickup } from './pools.ts';
import type { ServerCost } from './server.ts';
import type { Rate } from './util.ts';

export interface PerConcurrency {
  concurrency: number;
  library?: CycleResult;
  /** The floor: the cycle's two writes as plain statements on the same tables (issue #36). */
  floor?: CycleResult;
  http?: CycleResult;
  ceiling?: CycleResult;
  graphile?: Rate & { server?: ServerCost };
  pgbossPoll?: Rate;
  pgbossBurst?: Rate;
  bare?: Rate;
}

export interface Results {
  mode: 'quick' | 'full';
  startedAt: string;
  seconds?: number;
  tasks: number;
  jobSize: number;
  pgbossBurstBatch: number;
  rows: PerConcurrency[];
  empty: EmptyClaims[];
  wal?: EmptyWal;
  latency: Latency[];
  wide?: CycleResult;
  fan?: CycleResult;
  webhook?: WebhookLatency;
  lostRunner?: LostRunner;
  pickup?: PickupLatency;
  poolPickup?: PoolPickup;
  takeover?: TakeoverCost;
  groups?: GroupCost;
  jobPage?: { matrix: PageRender; layered: PageRender };
  notes: string[];
}

const f0 = (n: number | undefined) => (n === undefined || Number.isNaN(n) ? '–' : n.toFixed(0));
const f1 = (n: number | undefined) => (n === undefined || Number.isNaN(n) ? '–' : n.toFixed(1));
const f2 = (n: number | undefined) => (n === undefined || Number.isNaN(n) ? '–' : n.toFixed(2));
const ratio = (a: number | undefined, b: number | undefined) =>
  a === undefined || b === undefined || b === 0 ? undefined : a / b;
const rateCell = (r: Rate | undefined) =>
  r === undefined ? '–' : `${f0(r.perSecond)}${r.partial ? `*` : ''}`;

interface Target {
  name: string;
  measured: string;
  met: boolean | undefined;
}

export function targets(r: Results): Target[] {
  const at16 = r.rows.find((row) => row.concurrency === 16);
  const at64 = r.rows.find((row) => row.concurrency === 64);
  const lib16 = at16?.library?.perSecond;
  const out: Target[] = [];
  const gw = ratio(lib16, at16?.graphile?.perSecond);
  out.push({
    name: 'library ≥ 1.0× graphile-worker (c=16)',
    measured: `${f2(gw)}×`,
    met: gw === undefined ? undefined : gw >= 1.0,
  });
  const half = at16?.bare ? at16.bare.perSecond / 2 : undefined;
  const bare = ratio(lib16, half);
  out.push({
    name: 'library ≥ 0.8× half the bare-commit reference (c=16)',
    measured: `${f2(bare)}×`,
    met: bare === undefined ? undefined : bare >= 0.8,
  });
  const http = ratio(at16?.http?.perSecond, at16?.ceiling?.perSecond);
  out.push({
    name: 'HTTP ≥ 0.6× the HTTP ceiling (c=16)',
    measured: `${f2(http)}×`,
    met: http === undefined ? undefined : http >= 0.6,
  });
  // Issue #36: the library and the HTTP ceiling one after the other, as a
  // request through the routes costs both: 1/(1/lib + 1/ceiling).
  const ceiling16 = at16?.ceiling?.perSecond;
  const serial =
    lib16 && ceiling16 && lib16 > 0 && ceiling16 > 0 ? 1 / (1 / lib16 + 1 / ceiling16) : undefined;
  const httpSerial = ratio(at16?.http?.perSecond, serial);
  out.push({
    name: 'HTTP ≥ 0.8× the serial bound 1/(1/library + 1/HTTP ceiling) (c=16; issue #36)',
    measured: `${f2(httpSerial)}× (bound ${f0(serial)} cycles/s)`,
    met: httpSerial === undefined ? undefined : httpSerial >= 0.8,
  });
  // Issue #36: 40001/40P01 retries of the claim per 1,000 claims, and of the
  // follow-up's settle per 1,000 cycles.
  for (const [c, limit] of [
    [16, 10],
    [64, 30],
  ] as const) {
    const lib = r.rows.find((row) => row.concurrency === c)?.library;
    const claims = lib ? (lib.retries / Math.max(1, lib.claims)) * 1000 : undefined;
    out.push({
      name: `claim retries ≤ ${limit} per 1,000 claims (c=${c}; issue #36)`,
      measured: lib ? `${f1(claims)} (${lib.retries} over ${lib.claims})` : '–',
      met: claims === undefined ? undefined : claims <= limit,
    });
    const settles =
      lib?.settleRetries === undefined
        ? undefined
        : (lib.settleRetries / Math.max(1, lib.done)) * 1000;
    out.push({
      name: `follow-up settle retries ≤ ${limit} per 1,000 cycles (c=${c}; issue #36)`,
      measured:
        lib && settles !== undefined
          ? `${f1(settles)} (${lib.settleRetries} over ${lib.done})`
          : '–',
      met: settles === undefined ? undefined : settles <= limit,
    });
  }
  out.push({
    name: 'an empty claim writes no WAL in steady state',
    measured: r.wal ? `${r.wal.walBytes} bytes over ${r.wal.claims} claims` : '–',
    met: r.wal ? r.wal.walBytes === 0 : undefined,
  });
  const empty16 = r.empty.find((e) => e.concurrency === 16 && !(e.backlog > 0))?.perSecond;
  const emptyRatio = ratio(empty16, lib16);
  out.push({
    name: 'empty claims ≥ 5× the cycle rate (c=16)',
    measured: `${f1(emptyRatio)}×`,
    met: emptyRatio === undefined ? undefined : emptyRatio >= 5,
  });
  const small = r.latency[0];
  const big = r.latency[r.latency.length - 1];
  if (small && big && big !== small) {
    const p50 = big.p50 / small.p50;
    const p99 = big.p99 / small.p99;
    out.push({
      name: `claim latency with ${big.history.toExponential(0)} history within ±20% of ${small.history.toExponential(0)}`,
      measured: `p50 ${f2(p50)}×, p99 ${f2(p99)}×`,
      met: Math.abs(p50 - 1) <= 0.2 && Math.abs(p99 - 1) <= 0.2,
    });
  }
  for (const [name, shape] of [
    ['one job of 1,000 independent tasks', r.wide],
    ['one job fanning out and in (1 → 998 → 1)', r.fan],
  ] as const) {
    const x = ratio(lib16, shape?.perSecond);
    out.push({
      name: `${name} within 2× the jobs of 10 (c=16)`,
      measured: `${f2(x)}× slower`,
      met: x === undefined ? undefined : x <= 2,
    });
  }
  const t = r.takeover;
  out.push({
    name: `cycles with the claim's lease takeover within 5% of the claim without it (c=${t?.concurrency ?? 16}; issue #19)`,
    measured: t
      ? `${f2(t.ratio)}× over ${t.withTakeover.length} rounds (${f2(t.spread[0])} to ${f2(t.spread[1])})`
      : '–',
    met: t ? t.ratio >= 0.95 : undefined,
  });
  const g = r.groups;
  out.push({
    name: `cycles with every task in a concurrency group within 10% of cycles without (c=${g?.concurrency ?? 16}; issue #30)`,
    measured: g
      ? `${f2(g.ratio)}× over ${g.withGroups.length} rounds (${f2(g.spread[0])} to ${f2(g.spread[1])})`
      : '–',
    met: g ? g.ratio >= 0.9 : undefined,
  });
  const page = r.jobPage?.matrix;
  out.push({
    name: 'GET /jobs/{id} of 1,000 tasks ≤ 50 ms p50 (issue #15)',
    measured: page ? `p50 ${f1(page.p50)} ms` : '–',
    met: page ? page.p50 <= 50 : undefined,
  });
  const pick = r.pickup;
  out.push({
    name: `push to task running, runner idle ${pick?.idleS ?? 30} s, long poll: median < 250 ms (issue #52)`,
    measured: pick
      ? `p50 ${f0(pick.longPoll.p50)} ms, max ${f0(pick.longPoll.max)} ms (polling: p50 ${f0(pick.polling.p50)} ms)`
      : '–',
    met: pick ? pick.longPoll.p50 < 250 : undefined,
  });
  const errors = r.rows.reduce(
    (n, row) => n + (row.library?.errors ?? 0) + (row.http?.errors ?? 0),
    0,
  );
  out.push({
    name: '40001 retries never surface as errors',
    measured: `${at64?.library ? f0((at64.library.retries / Math.max(1, at64.library.claims)) * 1000) : '–'} retries per 1,000 claims at c=64; ${errors} errors in all runs`,
    met: at64?.library ? errors === 0 : undefined,
  });
  return out;
}

/**
 * What a library cycle and a graphile-worker job cost the server, each over
 * its own loop in this run (issue #36): WAL bytes and PostgreSQL's CPU time
 * per unit. Empty when no row measured them (results from before the meter).
 */
function serverCostTable(r: Results): string[] {
  const rows = r.rows.filter((row) => row.library?.server || row.graphile?.server);
  if (rows.length === 0) return [];
  const lines = [
    "## The server's cost per cycle",
    '',
    "WAL bytes written and CPU time of PostgreSQL's processes (from /proc, 10 ms ticks), over each loop, per cycle or job. The floor is the cycle's two writes as plain statements on the library's tables (a claim's `UPDATE … SKIP LOCKED`, a success's `UPDATE`) with none of its bookkeeping: what the task table costs before the product's guarantees.",
    '',
    '| concurrency | library cycles/s | floor cycles/s | lib / floor | library WAL bytes | floor | graphile-worker | library server CPU µs | floor | graphile-worker | lib / floor | lib / gw |',
    '|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|',
  ];
  for (const row of rows) {
    const lib = row.library?.server;
    const floor = row.floor?.server;
    const gw = row.graphile?.server;
    lines.push(
      `| ${row.concurrency} | ${rateCell(row.library)} | ${rateCell(row.floor)} | ${f2(ratio(row.library?.perSecond, row.floor?.perSecond))} | ${f0(lib?.walBytes)} | ${f0(floor?.walBytes)} | ${f0(gw?.walBytes)} | ${f0(lib?.cpuUs)} | ${f0(floor?.cpuUs)} | ${f0(gw?.cpuUs)} | ${f2(ratio(lib?.cpuUs, floor?.cpuUs))} | ${f2(ratio(lib?.cpuUs, gw?.cpuUs))} |`,
    );
  }
  lines.push('');
  return lines;
}

export function markdown(r: Results): string {
  const lines: string[] = [];
  lines.push(`# Conductor benchmark (${r.mode} run, ${r.startedAt})`, '');
  lines.push(
    `No-op task cycles per second (claim → complete → follow-up), ${r.tasks} tasks in jobs of ${r.jobSize}; other systems process ${r.tasks} no-op jobs. \`*\` = stopped at its time limit (rate over the work done).`,
    '',
  );
  lines.push(
    '| concurrency | library | HTTP | HTTP ceiling | graphile-worker | pg-boss (0.5 s, batch 1) | pg-boss burst | bare commits | ½ bare | lib / gw | lib / pg-boss | lib / pg-boss burst | lib / ½ bare | HTTP / ceiling |',
    '|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|',
  );
  for (const row of r.rows) {
    const lib = row.library?.perSecond;
    const half = row.bare ? row.bare.perSecond / 2 : undefined;
    lines.push(
      `| ${row.concurrency} | ${rateCell(row.library)} | ${rateCell(row.http)} | ${rateCell(row.ceiling)} | ${rateCell(row.graphile)} | ${rateCell(row.pgbossPoll)} | ${rateCell(row.pgbossBurst)} | ${rateCell(row.bare)} | ${f0(half)} | ${f2(ratio(lib, row.graphile?.perSecond))} | ${f1(ratio(lib, row.pgbossPoll?.perSecond))} | ${f2(ratio(lib, row.pgbossBurst?.perSecond))} | ${f2(ratio(lib, half))} | ${f2(ratio(row.http?.perSecond, row.ceiling?.perSecond))} |`,
    );
  }
  lines.push('', `pg-boss burst: batch size ${r.pgbossBurstBatch}, polling every 0.5 s.`, '');
  lines.push(...serverCostTable(r));
  lines.push('## Targets', '', '| target | measured | met |', '|---|---|---|');
  for (const t of targets(r)) {
    lines.push(
      `| ${t.name} | ${t.measured} | ${t.met === undefined ? 'not measured' : t.met ? 'yes' : '**no**'} |`,
    );
  }
  lines.push('', '## Other measurements', '');
  lines.push('| measurement | value |', '|---|---|');
  for (const e of r.empty) {
    if (e.backlog > 0) {
      // Old results (before the field) have no backlog: undefined > 0 is false.
      const plain = r.empty.find((p) => p.concurrency === e.concurrency && !(p.backlog > 0));
      lines.push(
        `| empty claims per second, library, c=${e.concurrency}, beside ${e.backlog} queued tasks of other labels | ${f0(e.perSecond)} (${f1(ratio(e.perSecond, plain?.perSecond))}× the rate with an empty queue) |`,
      );
    } else {
      lines.push(`| empty claims per second, library, c=${e.concurrency} | ${f0(e.perSecond)} |`);
    }
  }
  if (r.wal) {
    lines.push(
      `| WAL of ${r.wal.claims} empty claims in steady state | ${r.wal.walBytes} bytes |`,
      `| WAL of the 200 warm-up claims right after a CHECKPOINT | ${r.wal.warmupWalBytes} bytes |`,
    );
  }
  for (const l of r.latency) {
    lines.push(
      `| claim latency with ${l.history.toLocaleString('en')} finished tasks (c=1, ${l.samples} claims) | p50 ${f2(l.p50)} ms, p99 ${f2(l.p99)} ms |`,
    );
  }
  const lib16 = r.rows.find((row) => row.concurrency === 16)?.library;
  if (lib16)
    lines.push(
      `| ${r.tasks} tasks in jobs of ${r.jobSize}, c=16 | ${f0(lib16.perSecond)} cycles/s (${f2(lib16.seconds)} s) |`,
    );
  if (r.wide)
    lines.push(
      `| one job of ${r.tasks} independent tasks, c=16 | ${rateCell(r.wide)} cycles/s (${f2(r.wide.seconds)} s) |`,
    );
  if (r.fan)
    lines.push(
      `| one job of ${r.tasks} tasks, 1 → ${r.tasks - 2} → 1, c=16 | ${rateCell(r.fan)} cycles/s (${f2(r.fan.seconds)} s) |`,
    );
  if (r.webhook) {
    lines.push(
      `| webhook to first claimable task (${r.webhook.samples} pushes, ${r.webhook.failures} failed) | p50 ${f1(r.webhook.p50)} ms, p99 ${f1(r.webhook.p99)} ms |`,
    );
  }
  if (r.pickup) {
    const p = r.pickup;
    lines.push(
      `| push to task running, runner idle ${p.idleS} s, long poll (\`?wait=25\`), ${p.longPoll.times.length} rounds | median ${f0(p.longPoll.p50)} ms, max ${f0(p.longPoll.max)} ms (queued to claimed: median ${f0(p.longPoll.queuedToClaimed.p50)} ms, max ${f0(p.longPoll.queuedToClaimed.max)} ms) |`,
      `| the same, the runner polling (backoff 0.5 s doubling to ${p.polling.pollMaxS} s), same rounds | median ${f0(p.polling.p50)} ms, max ${f0(p.polling.max)} ms (queued to claimed: median ${f0(p.polling.queuedToClaimed.p50)} ms) |`,
    );
  }
  if (r.poolPickup) {
    const p = r.poolPickup;
    lines.push(
      `| push to task running (claimed), a \`process\` pool's runner launched for the task, ${p.launched.times.length} rounds | median ${f0(p.launched.p50)} ms, max ${f0(p.launched.max)} ms |`,
      `| the same, a warm runner already waiting (long poll), same rounds | median ${f0(p.warm.p50)} ms, max ${f0(p.warm.max)} ms |`,
    );
  }
  if (r.lostRunner) {
    const l = r.lostRunner;
    lines.push(
      `| lost runner: last heartbeat to the next claim (lease ${l.leaseS} s, idle poll ${l.pollMaxS} s), by takeover, sweep off | ${f1(l.takeoverS)} s |`,
      `| the same with the sweep only (every ${l.sweepIntervalS} s, then the next poll) | ${f1(l.sweepOnlyS)} s |`,
    );
  }
  if (r.groups) {
    const g = r.groups;
    const med = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];
    lines.push(
      `| the claim with every task in a concurrency group (a group per job of 10, limit 10) against none, both at once, ${g.concurrency} loops each, ${g.withGroups.length} rounds of ${f1(g.windowMs / 1000)} s | ${f2(g.ratio)}× (per round ${f2(g.spread[0])} to ${f2(g.spread[1])}; median ${f0(med(g.withGroups))} against ${f0(med(g.withoutGroups))} cycles/s) |`,
    );
  }
  if (r.takeover) {
    const t = r.takeover;
    const med = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];
    lines.push(
      `| the claim with lease takeover against the claim without it (migration 003's), both at once, ${t.concurrency} loops each, ${t.withTakeover.length} rounds of ${f1(t.windowMs / 1000)} s | ${f2(t.ratio)}× (per round ${f2(t.spread[0])} to ${f2(t.spread[1])}; median ${f0(med(t.withTakeover))} against ${f0(med(t.queueOnly))} cycles/s) |`,
    );
  }
  if (r.jobPage) {
    for (const [what, p] of [
      ['3 matrices', r.jobPage.matrix],
      ['no matrix, laid out by columns', r.jobPage.layered],
    ] as const) {
      lines.push(
        `| GET /jobs/{id}, ${p.tasks.toLocaleString('en')} tasks (${what}; ${p.groups} groups), server time over ${p.samples} | p50 ${f1(p.p50)} ms, p99 ${f1(p.p99)} ms (first view, laying out: ${f0(p.firstMs)} ms) |`,
        `| that page over the wire | ${f0(p.gzipBytes / 1024)} KB gzip (${f0(p.htmlBytes / 1024)} KB of HTML) |`,
      );
    }
  }
  for (const row of r.rows) {
    if (row.library) {
      lines.push(
        `| claim retries (40001/40P01) at c=${row.concurrency} | ${row.library.retries} over ${row.library.claims} claims (${f0((row.library.retries / Math.max(1, row.library.claims)) * 1000)} per 1,000); errors ${row.library.errors} |`,
      );
      const settles = row.library.settleRetries;
      if (settles !== undefined) {
        lines.push(
          `| follow-up settle retries (40001/40P01) at c=${row.concurrency} | ${settles} over ${row.library.done} cycles (${f0((settles / Math.max(1, row.library.done)) * 1000)} per 1,000) |`,
        );
      }
    }
  }
  if (r.notes.length) {
    lines.push('', '## Notes', '');
    for (const n of r.notes) lines.push(`- ${n}`);
  }
  if (r.seconds !== undefined) lines.push('', `Total run time: ${r.seconds.toFixed(0)} s.`);
  return `${lines.join('\n')}\n`;
}

/** Cycles (or jobs) per second against concurrency, log-scale x, one line per system. */
export function svg(r: Results): string {
  const W = 720;
  const H = 420;
  const L = 70;
  const R = 190;
  const T = 40;
  const B = 50;
  const series: {
    name: string;
    color: string;
    dash?: string;
    pick: (row: PerConcurrency) => number | undefined;
  }[] = [
    { name: 'Conductor (library)', color: '#1f77b4', pick: (x) => x.library?.perSecond },
    { name: 'Conductor (HTTP)', color: '#6baed6', pick: (x) => x.http?.perSecond },
    { name: 'graphile-worker', color: '#d62728', pick: (x) => x.graphile?.perSecond },
    { name: 'pg-boss (batch 1)', color: '#2ca02c', pick: (x) => x.pgbossPoll?.perSecond },
    { name: 'pg-boss (burst)', color: '#98df8a', pick: (x) => x.pgbossBurst?.perSecond },
    {
      name: '½ bare commits',
      color: '#7f7f7f',
      dash: '6 4',
      pick: (x) => (x.bare ? x.bare.perSecond / 2 : undefined),
    },
  ];
  const concs = r.rows.map((x) => x.concurrency);
  const minC = Math.min(...concs);
  const maxC = Math.max(...concs);
  let maxY = 1;
  for (const s of series) for (const row of r.rows) maxY = Math.max(maxY, s.pick(row) ?? 0);
  const step = 10 ** Math.floor(Math.log10(maxY));
  maxY = Math.ceil(maxY / step) * step;
  const x = (c: number) =>
    L +
    (maxC === minC
      ? 0
      : ((Math.log(c) - Math.log(minC)) / (Math.log(maxC) - Math.log(minC))) * (W - L - R));
  const y = (v: number) => H - B - (v / maxY) * (H - T - B);
  const parts: string[] = [];
  parts.push(
    `<svg xmlns="http://www.w3.org/2000/svg" width="${W}" height="${H}" viewBox="0 0 ${W} ${H}" font-family="sans-serif" font-size="12">`,
    `<rect width="${W}" height="${H}" fill="white"/>`,
    `<text x="${L}" y="22" font-size="14" font-weight="bold">No-op cycles (jobs) per second against concurrency (${r.mode} run)</text>`,
    `<line x1="${L}" y1="${H - B}" x2="${W - R}" y2="${H - B}" stroke="black"/>`,
    `<line x1="${L}" y1="${T}" x2="${L}" y2="${H - B}" stroke="black"/>`,
    `<text x="${(L + W - R) / 2}" y="${H - 12}" text-anchor="middle">concurrency (log scale)</text>`,
    `<text x="16" y="${(T + H - B) / 2}" text-anchor="middle" transform="rotate(-90 16 ${(T + H - B) / 2})">per second</text>`,
  );
  for (const c of concs) {
    parts.push(
      `<line x1="${x(c)}" y1="${H - B}" x2="${x(c)}" y2="${H - B + 5}" stroke="black"/>`,
      `<text x="${x(c)}" y="${H - B + 18}" text-anchor="middle">${c}</text>`,
    );
  }
  for (let i = 0; i <= 5; i++) {
    const v = (maxY / 5) * i;
    parts.push(
      `<line x1="${L}" y1="${y(v)}" x2="${W - R}" y2="${y(v)}" stroke="#eee"/>`,
      `<text x="${L - 6}" y="${y(v) + 4}" text-anchor="end">${Math.round(v)}</text>`,
    );
  }
  series.forEach((s, i) => {
    const pts = r.rows
      .map((row) => [row.concurrency, s.pick(row)] as const)
      .filter((p): p is readonly [number, number] => p[1] !== undefined);
    if (pts.length) {
      parts.push(
        `<polyline fill="none" stroke="${s.color}" stroke-width="2"${s.dash ? ` stroke-dasharray="${s.dash}"` : ''} points="${pts.map(([c, v]) => `${x(c).toFixed(1)},${y(v).toFixed(1)}`).join(' ')}"/>`,
      );
      for (const [c, v] of pts)
        parts.push(
          `<circle cx="${x(c).toFixed(1)}" cy="${y(v).toFixed(1)}" r="3" fill="${s.color}"/>`,
        );
    }
    const ly = T + 10 + i * 20;
    parts.push(
      `<line x1="${W - R + 15}" y1="${ly}" x2="${W - R + 40}" y2="${ly}" stroke="${s.color}" stroke-width="2"${s.dash ? ` stroke-dasharray="${s.dash}"` : ''}/>`,
      `<text x="${W - R + 46}" y="${ly + 4}">${s.name}</text>`,
    );
  });
  parts.push('</svg>');
  return `${parts.join('\n')}\n`;
}
