// Pickup: telling waiting claims that a task may have become claimable, so an
// idle runner's long poll answers at once instead of at its next poll. A
// wake-up is a hint sent after the commit that made the task claimable, never
// a grant: the woken claim runs conductor_claim like any other, and a claim
// that finds nothing waits again. Losing a wake-up costs the waiting runner
// the rest of its wait (at most the long poll's `wait`), never a task.
export { PICKUP_CHANNEL, PostgresPickup, type PostgresPickupOptions } from './postgres.ts';
export {
  InProcessPickup,
  type Pickup,
  type WaitEnd,
  type Waiter,
  Waiters,
} from './waiters.ts';
