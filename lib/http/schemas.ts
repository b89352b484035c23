import * as z from '../zod.ts';

/**
 * A lease id is a UUID. Any UUID is accepted here, so a well-formed lease that
 * is not the task's current one is answered 409 by the scheduler, not 400.
 */
export const LeaseIdSchema = z.pipe(
  z
    .string()
    .check(
      z.regex(/^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i, 'must be a UUID'),
    ),
  z.transform((v: string) => v.toLowerCase()),
);
