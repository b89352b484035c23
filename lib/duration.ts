/**
 * Formats seconds the way pipeline files write them (90 → 1m30s, 3600 → 1h,
 * 0 → 0s). The sweep and the runner both word timeouts with it, so a task
 * reads the same whichever side timed it out.
 */
export function formatDuration(seconds: number): string {
  const h = Math.floor(seconds / 3600);
  const m = Math.floor((seconds % 3600) / 60);
  const s = Math.round(seconds % 60);
  return [h ? `${h}h` : '', m ? `${m}m` : '', s ? `${s}s` : ''].join('') || '0s';
}
