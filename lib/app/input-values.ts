// Input values a manual trigger, a rerun or a schedule gives the pipeline's
// `inputs:`: apart from lib/app/schedules.ts so that what triggers a job does
// not load the cron parser (croner) with it (docs/architecture.md, "Bundles").
import * as z from '../zod.ts';

/** Input values as the pipeline's `inputs:` takes them. */
export const InputValuesSchema = z
  .record(
    z.string().check(z.regex(/^[A-Za-z_][A-Za-z0-9_]*$/, 'an input name is letters, digits and _')),
    z.union([z.string().check(z.maxLength(4096)), z.number(), z.boolean()]),
  )
  .check(z.refine((v) => Object.keys(v).length <= 50, 'at most 50 inputs'));
