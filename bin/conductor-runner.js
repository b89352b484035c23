#!/usr/bin/env node
// `npx conductor-runner`: the reference runner from this package's sources.
// It registers tsx's loader in this very process and runs the TypeScript
// entry: signals (SIGTERM for a graceful stop) reach the runner directly, with
// no wrapper process in between. Needs tsx installed beside the package. A
// host without the repository runs the one-file build instead
// (`npm run build-runner`, docs/runner.md "Install").
import { register } from 'tsx/esm/api';

register();
await import('../scripts/runner.ts');
