// The package's version: what `conductor --version` prints and GET /v1/health
// answers. Read from package.json at build time (esbuild inlines the import;
// tsx reads the file), so a bundle needs no package.json beside it.
import pkg from '../package.json' with { type: 'json' };

/** package.json's version, e.g. `0.1.0`. */
export const VERSION: string = pkg.version;
