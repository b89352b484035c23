// changes: through the real webhook and compile (issue #30): each diff base
// (a push's before..after, a new branch's and a force push's merge base with
// the default branch, a pull request's base...head, a tag's unknown diff),
// the file list from the push payload when it is complete and from git (a
// repository on this machine) when it is not, a path-skipped task shown
// skipped with its reason while its job and commit status succeed, and a
// rerun that keeps the decision.
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { after, test } from 'node:test';
import { githubPullRequest, githubPush } from '../forge/fixtures/github.ts';
import { type Json, sendWebhook, startE2E, waitForJob } from './calls.ts';
import { sha, ZERO_SHA } from './payloads.ts';

const root = mkdtempSync(join(tmpdir(), 'conductor-changes-'));
after(() => rmSync(root, { recursive: true, force: true }));
const repoDir = join(root, 'mono');
mkdirSync(repoDir);

function git(...args: string[]): string {
  return execFileSync(
    'git',
    ['-c', 'user.name=t', '-c', 'user.email=t@t', '-c', 'init.defaultBranch=main', ...args],
    { cwd: repoDir, encoding: 'utf8', env: { ...process.env, GIT_CONFIG_NOSYSTEM: '1' } },
  ).trim();
}

function commitFiles(files: Record<string, string>, message: string): string {
  for (const [path, text] of Object.entries(files)) {
    mkdirSync(dirname(join(repoDir, path)), { recursive: true });
    writeFileSync(join(repoDir, path), text);
  }
  git('add', '.');
  git('commit', '-q', '-m', message);
  return git('rev-parse', 'HEAD');
}

const PIPELINE = `version: 1
tasks:
  web:
    script: [make web]
    changes: ["src/**", "!src/**/*.md"]
  docs:
    script: [make docs]
    changes: { include: [docs/**] }
  publish-docs:
    script: [publish]
    needs: [docs]
  lint:
    script: [lint]
`;

git('init', '-q');
const base = commitFiles(
  { '.conductor.yml': PIPELINE, 'src/a.ts': 'a\n', 'docs/x.md': 'x\n' },
  'start',
);

const LOCAL = 'acme/mono';
const HOSTED = 'acme/hosted';
const { stack, fake, projects } = await startE2E(import.meta.filename, {
  projects: {
    local: {
      forge: 'github',
      id: 'mono',
      repo: LOCAL,
      repo_url: repoDir,
      cancel_superseded: false,
    },
    hosted: {
      forge: 'github',
      id: 'hosted',
      repo: HOSTED,
      cancel_superseded: false,
      forge_token: 'ghp_test',
    },
  },
});

type Commit = { added?: string[]; removed?: string[]; modified?: string[] };

/** Pushes `after` to `ref` with a GitHub payload; `over` replaces its fields (before, commits, created, forced). */
async function push(
  repo: string,
  secret: string,
  afterSha: string,
  ref: string,
  over: Record<string, unknown> = {},
): Promise<Record<string, Json>> {
  const payload = { ...githubPush(repo, afterSha, { ref }), ...over };
  const hook = await sendWebhook(stack, 'github', 'push', payload, { secret });
  assert.equal(hook.status, 202, hook.text);
  return waitForJob(stack, hook.body.job_id);
}

const commitsOf = (...lists: Commit[]) =>
  lists.map((c, i) => ({
    id: sha(`c${i}-${JSON.stringify(c)}`),
    message: 'm',
    added: c.added ?? [],
    removed: c.removed ?? [],
    modified: c.modified ?? [],
  }));

function states(view: Record<string, Json>): Record<string, string> {
  return Object.fromEntries(view.tasks.map((t: Json) => [t.name, t.state]));
}
const errorOf = (view: Record<string, Json>, name: string) =>
  view.tasks.find((t: Json) => t.name === name)?.error;

test('a push with a complete payload decides on its lists: a task no file concerns is skipped with the reason', async () => {
  const next = commitFiles({ 'docs/x.md': 'x2\n' }, 'docs only');
  const view = await push(LOCAL, projects.local.secret, next, 'refs/heads/main', {
    before: base,
    commits: commitsOf({ modified: ['docs/x.md'] }),
  });
  assert.deepEqual(states(view), {
    web: 'skipped',
    docs: 'queued',
    'publish-docs': 'waiting',
    lint: 'queued',
  });
  assert.equal(errorOf(view, 'web'), 'no changed file matches src/** outside src/**/*.md');
  assert.equal(view.job.diff_base, `${base.slice(0, 12)}..${next.slice(0, 12)}`);
  assert.deepEqual(view.job.diff_files, ['docs/x.md']);
  assert.equal(view.job.diff_count, 1);
  assert.equal(view.job.diff_note, 'from the push payload');
});

test('a push whose payload is not complete (20 commits) is compared by git, before..after', async () => {
  const from = git('rev-parse', 'HEAD');
  const next = commitFiles({ 'src/b.ts': 'b\n', 'src/notes.md': 'n\n' }, 'code');
  const twenty = commitsOf(...Array.from({ length: 20 }, () => ({ modified: ['docs/x.md'] })));
  const view = await push(LOCAL, projects.local.secret, next, 'refs/heads/main', {
    before: from,
    commits: twenty,
  });
  assert.deepEqual(states(view), {
    web: 'queued',
    docs: 'skipped',
    'publish-docs': 'skipped',
    lint: 'queued',
  });
  assert.equal(errorOf(view, 'docs'), 'no changed file matches docs/**');
  assert.equal(errorOf(view, 'publish-docs'), 'skipped: docs did not run');
  assert.equal(view.job.diff_note, 'from git');
  assert.deepEqual(view.job.diff_files.sort(), ['src/b.ts', 'src/notes.md']);
});

test('a new branch is compared with its merge base with the default branch', async () => {
  const mainHead = git('rev-parse', 'HEAD');
  git('checkout', '-q', '-b', 'feature');
  const first = commitFiles({ 'docs/guide.md': 'g\n' }, 'feature docs');
  const second = commitFiles({ 'docs/guide.md': 'g2\n' }, 'feature docs again');
  git('checkout', '-q', 'main');
  // main moves on after the branch left it: its changes are not the branch's.
  commitFiles({ 'src/c.ts': 'c\n' }, 'main moves');
  const view = await push(LOCAL, projects.local.secret, second, 'refs/heads/feature', {
    before: ZERO_SHA,
    created: true,
    // The payload lists only the last commit: a new branch's list is never used.
    commits: commitsOf({ modified: ['docs/guide.md'] }),
  });
  assert.deepEqual(states(view), {
    web: 'skipped',
    docs: 'queued',
    'publish-docs': 'waiting',
    lint: 'queued',
  });
  assert.match(view.job.diff_base, /^main\.\.\..* \(a new branch: its merge base with main\)$/);
  assert.deepEqual(view.job.diff_files, ['docs/guide.md']);
  assert.ok(first !== mainHead);
});

test('a force push is compared with the merge base with the default branch, not with before', async () => {
  git('checkout', '-q', '-b', 'rewrite', base);
  const rewritten = commitFiles({ 'src/rewrite.ts': 'r\n' }, 'rewritten');
  git('checkout', '-q', 'main');
  const view = await push(LOCAL, projects.local.secret, rewritten, 'refs/heads/rewrite', {
    // before is a commit the branch no longer has; its diff would be wrong.
    before: sha('gone'),
    forced: true,
    commits: commitsOf({ modified: ['docs/x.md'] }),
  });
  assert.equal(states(view).web, 'queued');
  assert.equal(states(view).docs, 'skipped');
  assert.match(view.job.diff_base, /\(a force push: its merge base with main\)$/);
  assert.deepEqual(view.job.diff_files, ['src/rewrite.ts']);
});

test('a pull request is compared base...head', async () => {
  git('checkout', '-q', '-b', 'pr', 'main');
  const head = commitFiles({ 'docs/pr.md': 'p\n' }, 'pr docs');
  git('checkout', '-q', 'main');
  const payload = githubPullRequest('opened', { repo: LOCAL, headSha: head, baseRef: 'main' });
  const hook = await sendWebhook(stack, 'github', 'pull_request', payload, {
    secret: projects.local.secret,
  });
  assert.equal(hook.status, 202, hook.text);
  const view = await waitForJob(stack, hook.body.job_id);
  assert.equal(view.job.diff_base, `main...${head.slice(0, 12)}`);
  assert.deepEqual(view.job.diff_files, ['docs/pr.md']);
  assert.equal(states(view).web, 'skipped');
});

test('a tag has no diff: every task runs and the job says why', async () => {
  const head = git('rev-parse', 'HEAD');
  const view = await push(LOCAL, projects.local.secret, head, 'refs/tags/v1.0', {
    head_commit: { id: head },
  });
  assert.deepEqual(states(view), {
    web: 'queued',
    docs: 'queued',
    'publish-docs': 'waiting',
    lint: 'queued',
  });
  assert.equal(view.job.diff_base, null);
  assert.equal(view.job.diff_note, 'a tag has no diff to compare');
});

test('a job whose every task is left out succeeds, and so does its commit status; a rerun keeps the decision', async () => {
  const hosted = `version: 1
tasks:
  web: { script: [make], changes: [src/**] }
  after-web: { script: [x], needs: [web] }
`;
  const next = sha('hosted-docs');
  fake.setFile(HOSTED, next, hosted);
  const view = await push(HOSTED, projects.hosted.secret, next, 'refs/heads/main', {
    before: sha('hosted-before'),
    commits: commitsOf({ modified: ['README.md'] }),
  });
  const done = await waitForJob(stack, view.job.id, (v) => v.job.state !== 'running');
  assert.equal(done.job.state, 'success');
  assert.deepEqual(states(done), { web: 'skipped', 'after-web': 'skipped' });
  const { rows } = await stack.context.pool.query<{ state: string; description: string }>(
    'select state, description from status_outbox where job_id = $1 order by id desc limit 1',
    [done.job.id],
  );
  assert.deepEqual(rows[0], { state: 'success', description: '0 passed, 2 skipped' });

  const rerun = await stack.call('POST', `/v1/jobs/${done.job.id}/rerun`, {
    token: stack.adminToken,
    body: {},
  });
  assert.equal(rerun.status, 202, rerun.text);
  const again = await waitForJob(stack, rerun.body.job_id, (v) => v.job.state === 'success');
  assert.deepEqual(states(again), { web: 'skipped', 'after-web': 'skipped' });
  assert.equal(errorOf(again, 'web'), 'no changed file matches src/**');
  assert.equal(again.job.diff_base, done.job.diff_base);
});
