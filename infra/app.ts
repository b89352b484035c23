// The CDK app. Bundles the functions with esbuild (scripts/bundle.ts), then
// synthesises the stack into cdk.out: offline, without Docker, credentials
// or context lookups.
//   npm run synth                              bundle, then synthesise
//   npm run synth -- -c proxy=false            settings as context (docs/deploy.md)
//   npm run synth -- --no-bundle               reuse dist/functions as it is
//   npm run cdk -- deploy -c alarmEmail=ops@example.com
import { join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { App } from 'aws-cdk-lib';
import { buildRunner } from '../scripts/build-runner.ts';
import { bundleFunctions, DEFAULT_OUTDIR } from '../scripts/bundle.ts';
import { ContextError, contextFromArgs, propsFromContext } from './context.ts';
import { ConductorStack } from './stack.ts';

const ROOT = fileURLToPath(new URL('..', import.meta.url));
const args = process.argv.slice(2);
const at = args.indexOf('--bundle-dir');
const bundleDir = resolve(at >= 0 && args[at + 1] ? args[at + 1]! : DEFAULT_OUTDIR);

// The settings first: a bad one is said before a minute of bundling, and
// alone, since its message names the setting and what it takes (a stack
// trace would bury it).
let app: App;
let settings: ReturnType<typeof propsFromContext>;
try {
  app = new App({
    // Under the CDK CLI, CDK_OUTDIR (and CDK_CONTEXT_JSON) come from it.
    outdir: process.env.CDK_OUTDIR ?? join(ROOT, 'cdk.out'),
    context: contextFromArgs(args),
    analyticsReporting: false,
  });
  settings = propsFromContext((key) => app.node.tryGetContext(key));
} catch (err) {
  if (!(err instanceof ContextError)) throw err;
  console.error(err.message);
  process.exit(1);
}
const { stackName, props } = settings;

if (!args.includes('--no-bundle')) {
  const started = Date.now();
  const bundles = await bundleFunctions({ outdir: bundleDir });
  const sizes = bundles.map((b) => `${b.name} ${Math.round(b.bytes / 1024)} KB`).join(', ');
  // stderr: the CDK CLI reads the app's stdout for nothing, but keep it clean.
  console.error(`bundled in ${Date.now() - started} ms: ${sizes}`);
  // The Fargate runners' image is built from Dockerfile.runner at deploy:
  // its one file is built here.
  if (props.fargateRunners && !props.runnerImage) {
    const runner = await buildRunner();
    console.error(`built the runner: ${runner.outfile}`);
  }
}
new ConductorStack(app, stackName, {
  ...props,
  bundleDir,
  description: 'Conductor: a serverless CI control plane',
});
const assembly = app.synth();
console.error(`synthesised ${stackName} into ${assembly.directory}`);
