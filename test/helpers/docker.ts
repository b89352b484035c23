// The real Docker engine the docker tests (*.docker.test.ts) run on: the one
// DOCKER_HOST names, with the test images built (.ci/run starts an engine and
// builds them: .ci/docker/README.md). npm test leaves these files out without
// DOCKER_HOST (scripts/test.ts); given one, a missing image fails the file
// with what to run.
import { execFile } from 'node:child_process';
import { promisify } from 'node:util';
import { waitFor } from '../runner/support.ts';

const exec = promisify(execFile);

/** sh, wget, nc (busybox); no bash, no git. */
export const BUSYBOX = 'conductor-test/busybox:1';
/** busybox httpd on port 8080, answering "hello from websvc", logging each request. */
export const WEBSVC = 'conductor-test/websvc:1';
/** BUSYBOX with `USER 1000:1000`: an image that does not run as root (made by userImage). */
export const BUSYBOX_USER = 'conductor-test/busybox-user:1';

/** Runs the docker CLI on DOCKER_HOST's engine; answers its stdout, rejects when it fails. */
export async function docker(...args: string[]): Promise<string> {
  const { stdout } = await exec('docker', args, { env: process.env, timeout: 60_000 });
  return stdout;
}

/** Fails (with what to do) unless DOCKER_HOST's engine answers and has the test images. */
export async function requireEngine(): Promise<void> {
  if (!process.env.DOCKER_HOST) {
    throw new Error('the docker tests need DOCKER_HOST (scripts/test.ts leaves them out without)');
  }
  try {
    await docker('image', 'inspect', '--format', '{{.Id}}', BUSYBOX, WEBSVC);
  } catch (err) {
    throw new Error(
      `the engine at DOCKER_HOST=${process.env.DOCKER_HOST} lacks the test images (build them: DOCKER_HOST=... .ci/docker/build-busybox-images.sh DIR): ${(err as Error).message}`,
    );
  }
}

/** BUSYBOX_USER, made from BUSYBOX on first use (a container committed with another USER). */
export async function userImage(): Promise<string> {
  const present = await docker('image', 'inspect', BUSYBOX_USER).then(
    () => true,
    () => false,
  );
  if (!present) {
    const id = (await docker('create', BUSYBOX)).trim();
    try {
      await docker('commit', '--change', 'USER 1000:1000', id, BUSYBOX_USER);
    } finally {
      await docker('rm', '-f', id);
    }
  }
  return BUSYBOX_USER;
}

/**
 * The containers and networks that belong to a task, by any means the engine
 * shows: a label naming it, or a name made from its id (the script's
 * container is `conductor-<id>-<attempt>`, the services' and the network
 * `conductor-<first 12 of the id>-…`).
 */
export async function traces(
  taskId: string,
): Promise<{ containers: string[]; networks: string[] }> {
  const short = `conductor-${taskId.replace(/[^a-zA-Z0-9]/g, '').slice(0, 12)}-`;
  const mine = (line: string) =>
    line.includes(taskId) || line.includes(short) || line.includes(`conductor-${taskId}-`);
  const containers = (
    await docker('ps', '--all', '--no-trunc', '--format', '{{.Names}} {{.Labels}}')
  )
    .split('\n')
    .filter((l) => l && mine(l));
  const networks = (
    await docker('network', 'ls', '--no-trunc', '--format', '{{.Name}} {{.Labels}}')
  )
    .split('\n')
    .filter((l) => l && mine(l));
  return { containers, networks };
}

/** The task's containers, as `docker ps --filter label=conductor.task=<id>` lists them (the documented clean-up). */
export async function labelled(taskId: string): Promise<string[]> {
  return (
    await docker(
      'ps',
      '--all',
      '--filter',
      `label=conductor.task=${taskId}`,
      '--format',
      '{{.Names}}',
    )
  )
    .split('\n')
    .filter(Boolean);
}

/** Waits until the engine shows nothing of these tasks (removal comes after the report). */
export async function nothingLeft(...taskIds: string[]): Promise<void> {
  for (const id of taskIds) {
    await waitFor(
      `nothing of task ${id} in docker ps -a or docker network ls`,
      async () => {
        const left = await traces(id);
        return left.containers.length + left.networks.length === 0 ? true : undefined;
      },
      20_000,
    ).catch(async (err) => {
      throw new Error(`${err.message}: ${JSON.stringify(await traces(id))}`);
    });
  }
}
