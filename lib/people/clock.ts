// The clock that decides whether a cached permission is still fresh and a
// session still open. Wall time, unless a test drives it (the permission
// cache's five minutes are tested without waiting five minutes).
let source: () => number = () => Date.now();

/** Now, in milliseconds since the epoch. */
export function peopleNow(): number {
  return source();
}

/** Drives the clock (tests); `null` gives it back to the wall. */
export function setPeopleClock(fn: (() => number) | null): void {
  source = fn ?? (() => Date.now());
}
