import { z } from 'zod';

/**
 * A lease id is a UUID. Any UUID is accepted here, so a well-formed lease that
 * is not the task's current one is answered 409 by the scheduler, not 400.
 */
export const LeaseIdSchema = z
  .string()
  .regex(/^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i, 'must be a UUID')
  .transform((v) => v.toLowerCase());
