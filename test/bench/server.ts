// What a run costs the database server: WAL bytes written and CPU time of
// PostgreSQL's processes, per unit of work (issue #36). Rates move with
// whatever else the machine does; these two move with what each cycle makes
// the server do, so a change to the cycle reads in them first.
import { readdirSync, readFileSync } from 'node:fs';
import pg from 'pg';

export interface ServerCost {
  /** Units of work done over the window (cycles, jobs). */
  units: number;
  /** WAL bytes written per unit, the whole cluster (nothing else runs during the window). */
  walBytes: number;
  /** CPU time of the server's processes per unit, µs; undefined where /proc cannot be read. */
  cpuUs: number | undefined;
}

/** The fields of /proc/<pid>/stat after the command name (state first), or undefined. */
function statOf(pid: number): string[] | undefined {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    return stat.slice(stat.lastIndexOf(')') + 2).split(' ');
  } catch {
    return undefined;
  }
}

/** utime + stime (+ reaped children's, when `children`) of a process, in clock ticks. */
function ticksOf(pid: number, children: boolean): number | undefined {
  const f = statOf(pid);
  if (!f) return undefined;
  const own = Number(f[11]) + Number(f[12]);
  return children ? own + Number(f[13]) + Number(f[14]) : own;
}

const parentOf = (pid: number): number | undefined => {
  const f = statOf(pid);
  return f ? Number(f[1]) : undefined;
};

/**
 * CPU µs used so far by the postmaster and every process it started, live
 * (backends, background writer, WAL writer, checkpointer, autovacuum) or
 * ended (counted in the postmaster's reaped children's time).
 */
function serverCpuUs(postmaster: number): number | undefined {
  let ticks = ticksOf(postmaster, true);
  if (ticks === undefined) return undefined;
  for (const entry of readdirSync('/proc')) {
    if (!/^\d+$/.test(entry)) continue;
    const pid = Number(entry);
    if (pid !== postmaster && parentOf(pid) === postmaster) ticks += ticksOf(pid, false) ?? 0;
  }
  // Linux reports these in USER_HZ, 100 a second on every architecture Node runs on.
  return (ticks / 100) * 1e6;
}

/** A window over which the server's cost is measured: open it, do the work, close it with the units done. */
export interface ServerMeter {
  close(units: number): Promise<ServerCost>;
}

/**
 * Opens a window on the server behind `url` (a local one: its processes are
 * read from /proc; a remote one gives WAL only). The WAL position is read
 * through its own connection, which stays open for the window.
 */
export async function openServerMeter(url: string): Promise<ServerMeter> {
  const client = new pg.Client({ connectionString: url });
  await client.connect();
  const { rows } = await client.query<{ lsn: string; pid: number }>(
    'select pg_current_wal_lsn()::text as lsn, pg_backend_pid() as pid',
  );
  const { lsn, pid } = rows[0]!;
  const postmaster = parentOf(pid);
  const cpu0 = postmaster === undefined ? undefined : serverCpuUs(postmaster);
  return {
    async close(units) {
      try {
        const cpu1 = postmaster === undefined ? undefined : serverCpuUs(postmaster);
        const wal = await client.query<{ bytes: string }>(
          'select pg_wal_lsn_diff(pg_current_wal_lsn(), $1::pg_lsn)::text as bytes',
          [lsn],
        );
        const n = Math.max(1, units);
        return {
          units,
          walBytes: Number(wal.rows[0]!.bytes) / n,
          cpuUs: cpu0 === undefined || cpu1 === undefined ? undefined : (cpu1 - cpu0) / n,
        };
      } finally {
        await client.end();
      }
    },
  };
}
