#!/usr/bin/env node
// `npx conductor-runner`: the reference runner. There is no build step yet, so
// this registers tsx's loader in this very process and runs the TypeScript
// entry: signals (SIGTERM for a graceful stop) reach the runner directly, with
// no wrapper process in between. Needs tsx installed beside the package.
import { register } from 'tsx/esm/api';

register();
await import('../scripts/runner.ts');
