// The runner's version, as `--version` prints it and its start-up line logs
// it. `npm run build-runner` writes it into the bundle (esbuild's define):
// package.json's version and the commit it was built from. A runner run from
// a checkout (`npm run runner`, tsx) has no build, and says so.
declare const __CONDUCTOR_RUNNER_VERSION__: string | undefined;

/** E.g. `0.1.0 (git 06bee68c1d2e)`; `unbuilt (run from a checkout)` outside a bundle. */
export const RUNNER_VERSION: string =
  typeof __CONDUCTOR_RUNNER_VERSION__ === 'string'
    ? __CONDUCTOR_RUNNER_VERSION__
    : 'unbuilt (run from a checkout)';
