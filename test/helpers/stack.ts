// The local stack on this test file's database: the real functions behind the
// real local HTTP server, as `npm start` runs them.
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after } from 'node:test';
import { setQuiet } from '../../lib/log.ts';
import { type LocalStack, startLocalStack } from '../../local/stack.ts';
import { testDatabase } from './db.ts';

export interface TestStack extends LocalStack {
  /** fetch against the stack with JSON in and out; `token` adds a bearer token. */
  call(
    method: string,
    path: string,
    opts?: {
      token?: string;
      body?: unknown;
      raw?: string | Buffer;
      headers?: Record<string, string>;
    },
    // biome-ignore lint/suspicious/noExplicitAny: tests read whatever JSON the route answers
  ): Promise<{ status: number; body: any; text: string; headers: Headers }>;
}

/** Starts the stack for the calling test file; stopped when the file ends. */
export async function testStack(
  file: string,
  env: Record<string, string> = {},
): Promise<TestStack> {
  const db = await testDatabase(file, { migrate: false });
  const dataDir = await mkdtemp(join(tmpdir(), 'conductor-stack-'));
  // The tests provoke errors on purpose; their log lines would only be noise.
  setQuiet(process.env.CONDUCTOR_TEST_LOGS !== '1');
  const stack = await startLocalStack(
    {
      DATABASE_URL: db.url,
      PORT: '0',
      CONDUCTOR_DATA_DIR: dataDir,
      CONDUCTOR_DB_POOL_MAX: '10',
      // The fake forges are on loopback, which the control plane refuses to
      // call otherwise; a test of that refusal passes '' to unset it.
      CONDUCTOR_ALLOW_PRIVATE_FORGES: '1',
      ...env,
    },
    { sweep: false },
  );
  after(async () => {
    await stack.stop();
    await rm(dataDir, { recursive: true, force: true });
  });
  return {
    ...stack,
    async call(method, path, opts = {}) {
      const headers: Record<string, string> = { ...opts.headers };
      if (opts.token) headers.authorization = `Bearer ${opts.token}`;
      let body: string | Buffer | undefined;
      if (opts.raw !== undefined) body = opts.raw;
      else if (opts.body !== undefined) {
        body = JSON.stringify(opts.body);
        headers['content-type'] = 'application/json';
      }
      const res = await fetch(`${stack.url}${path}`, { method, headers, body });
      const text = await res.text();
      let parsed: unknown = null;
      try {
        parsed = text ? JSON.parse(text) : null;
      } catch {
        parsed = null;
      }
      return { status: res.status, body: parsed, text, headers: res.headers };
    },
  };
}
