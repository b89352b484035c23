// The browser tests' pieces: Debian's Chromium driven by playwright-core
// (which downloads nothing), a fresh profile per file, screenshots kept under
// test-artifacts/, and a job on the real stack driven through the runner API.
import assert from 'node:assert/strict';
import { existsSync } from 'node:fs';
import { mkdir } from 'node:fs/promises';
import { join } from 'node:path';
import { after } from 'node:test';
import { fileURLToPath } from 'node:url';
import { type Browser, type BrowserContext, chromium, type Page } from 'playwright-core';
import {
  claimTask,
  complete,
  createWorker,
  deliverRunning,
  type E2E,
  type Json,
  uploadLog,
} from '../e2e/calls.ts';
import { pipeline, sha } from '../e2e/payloads.ts';
import { githubPush } from '../forge/fixtures/github.ts';
import type { TestStack } from '../helpers/stack.ts';

/** Where Debian's package puts Chromium; scripts/test.ts leaves these files out without it. */
export const CHROMIUM = process.env.CONDUCTOR_CHROMIUM ?? '/usr/bin/chromium';
export const chromiumFound = () => existsSync(CHROMIUM);

/** Screenshots of the pages, for people to look at (gitignored). */
export const ARTIFACTS = fileURLToPath(new URL('../../test-artifacts/', import.meta.url));

/**
 * Launches Chromium headless; closed when the file ends. playwright gives it a
 * fresh --user-data-dir of its own (and deletes it on close).
 */
export async function launchBrowser(): Promise<Browser> {
  const browser = await chromium.launch({
    executablePath: CHROMIUM,
    // playwright passes --headless itself; the rest keeps Chromium from
    // reaching out to the network or needing a sandbox it cannot have as root.
    args: [
      '--headless',
      '--no-sandbox',
      '--disable-gpu',
      '--disable-quic',
      '--no-first-run',
      '--disable-background-networking',
      '--disable-component-update',
      '--disable-sync',
    ],
  });
  after(() => browser.close());
  return browser;
}

/** A page in a fresh context (no cookies), 1280×800 unless told. */
export async function newPage(
  browser: Browser,
  viewport = { width: 1280, height: 800 },
): Promise<{ context: BrowserContext; page: Page }> {
  const context = await browser.newContext({ viewport });
  const page = await context.newPage();
  return { context, page };
}

/** Signs the page's context in through /login with the admin token. */
export async function signIn(page: Page, stack: TestStack, next = '/'): Promise<void> {
  await page.goto(`${stack.url}/login?next=${encodeURIComponent(next)}`);
  await page.fill('#token', stack.adminToken);
  await Promise.all([
    page.waitForURL((u) => u.pathname === next.split('?')[0]),
    page.click('button[type=submit]'),
  ]);
}

/** Saves a screenshot of the page as test-artifacts/<name>.png. */
export async function screenshot(page: Page, name: string): Promise<string> {
  await mkdir(ARTIFACTS, { recursive: true });
  const path = join(ARTIFACTS, `${name}.png`);
  await page.screenshot({ path, fullPage: false });
  return path;
}

export interface RunningJob {
  jobId: string;
  view: Record<string, Json>;
  /** The worker token that claims this job's tasks (they carry `label`). */
  token: string;
  label: string;
}

/** Pushes `tasks` (pipeline YAML under `tasks:`) on a branch named after `label`; answers the running job. */
export async function runningJob(
  e2e: E2E<'project'>,
  label: string,
  tasks: string,
  opts: { ref?: string } = {},
): Promise<RunningJob> {
  const commit = sha(label);
  e2e.fake.setFile(e2e.projects.project.project.repo, commit, pipeline(label, tasks));
  const { hook, view } = await deliverRunning(
    e2e.stack,
    'github',
    'push',
    githubPush(e2e.projects.project.project.repo, commit, {
      ref: opts.ref ?? `refs/heads/${label}`,
    }),
    e2e.projects.project.secret,
  );
  const { token } = await createWorker(e2e.stack, [label]);
  return { jobId: hook.body.job_id, view, token, label };
}

/** Claims the next task as a runner, logs `lines` and completes it with `outcome`. */
export async function runTask(
  stack: TestStack,
  token: string,
  opts: { log?: string; outcome?: 'success' | 'failed'; exitCode?: number } = {},
): Promise<Record<string, Json>> {
  const task = await claimTask(stack, token);
  if (opts.log) {
    const res = await uploadLog(stack, token, task.id, {
      lease_id: task.lease_id,
      offset: 0,
      data: opts.log,
    });
    assert.equal(res.status, 200, res.text);
  }
  const outcome = opts.outcome ?? 'success';
  const res = await complete(stack, token, task.id, {
    lease_id: task.lease_id,
    outcome,
    exit_code: opts.exitCode ?? (outcome === 'success' ? 0 : 1),
  });
  assert.equal(res.status, 200, res.text);
  return task;
}
