// zod for every module of Conductor: `import * as z from '../zod.ts'`.
//
// It is `zod/mini` (issue #56): the same checks and messages as classic zod,
// written as functions (`z.optional(s)`, `s.check(z.minLength(1))`) instead
// of methods, so that esbuild keeps only the functions a bundle calls
// (about 18 KB, against classic zod's 188 KB and ~45 ms of every cold
// start). Import it as a namespace (`import * as z`): esbuild shakes a
// namespace import, but not zod's own `z` object (`import { z } from
// 'zod/mini'` keeps all of zod's core). English messages are configured
// here, once, before any module parses (zod/mini loads no locale).
import { config } from 'zod/mini';
import en from 'zod/v4/locales/en.js';

config(en());

export * from 'zod/mini';
