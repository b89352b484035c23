// changes: with the forge's compare API (issue #30): a push whose payload
// does not list every commit is compared by the forge, page after page, past
// GitHub's 300 files (GitHub's cap must never make a task silently not run: a
// comparison that stops at the cap is unknown, and every task runs); Gitea's
// answer lists the files per commit. A fake compare API stands in for the
// forges; everything else goes to the fake forge of the e2e stack.
import assert from 'node:assert/strict';
import { createServer, type IncomingMessage, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { after, test } from 'node:test';
import { MAX_COMPARE_CHARS, MAX_COMPARE_FILES } from '../../lib/forge/compare.ts';
import { giteaPush } from '../forge/fixtures/gitea.ts';
import { githubPush } from '../forge/fixtures/github.ts';
import { type Json, sendWebhook, startE2E, waitForJob } from './calls.ts';
import { sha } from './payloads.ts';

/** The files a comparison answers, by `base...head`; each GitHub page holds `perPage` of them. */
const comparisons = new Map<string, string[]>();
const asked: string[] = [];
let forgeUrl = '';
let perPage = 100;

async function serve(req: IncomingMessage, res: ServerResponse): Promise<void> {
  const url = new URL(req.url ?? '/', 'http://fake');
  const compare = /^\/(?:api\/v1\/)?repos\/[^/]+\/[^/]+\/compare\/(.+)$/.exec(url.pathname);
  if (!compare) {
    // Not a comparison: the e2e fake forge answers (the pipeline file).
    const upstream = await fetch(`${forgeUrl}${req.url}`, {
      headers: { accept: String(req.headers.accept ?? 'application/json') },
    });
    res.writeHead(upstream.status, {
      'content-type': upstream.headers.get('content-type') ?? 'application/json',
    });
    res.end(Buffer.from(await upstream.arrayBuffer()));
    return;
  }
  const key = decodeURIComponent(compare[1] ?? '');
  asked.push(`${url.pathname}?${url.searchParams}`);
  const files = comparisons.get(key);
  if (!files) {
    res.writeHead(404, { 'content-type': 'application/json' });
    res.end('{"message":"Not Found"}');
    return;
  }
  const page = Number(url.searchParams.get('page') ?? '1');
  const slice = files.slice((page - 1) * perPage, page * perPage);
  const last = page * perPage >= files.length;
  const headers: Record<string, string> = { 'content-type': 'application/json' };
  if (!last) headers.link = `<${url.origin}${url.pathname}?page=${page + 1}>; rel="next"`;
  res.writeHead(200, headers);
  if (url.pathname.startsWith('/api/v1/')) {
    // Gitea: the commits, each with the files it touched.
    res.end(
      JSON.stringify({ commits: [{ sha: 'x', files: slice.map((filename) => ({ filename })) }] }),
    );
  } else {
    res.end(
      JSON.stringify({
        commits: [],
        files: slice.map((filename) => ({ filename, status: 'modified' })),
      }),
    );
  }
}

const server = createServer((req, res) => {
  serve(req, res).catch(() => {
    res.writeHead(500);
    res.end();
  });
});
await new Promise<void>((done) => server.listen(0, '127.0.0.1', done));
after(() => new Promise<void>((done) => server.close(() => done())));
const compareUrl = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;

const REPO = 'acme/wide';
const e2e = await startE2E(import.meta.filename, {
  env: { CONDUCTOR_GITHUB_API_URL: compareUrl },
  projects: {
    project: {
      forge: 'github',
      id: 'wide',
      repo: REPO,
      cancel_superseded: false,
      forge_token: 'ghp_t',
    },
  },
});
forgeUrl = e2e.fake.url;
const { stack } = e2e;
const { project } = e2e.projects;

const PIPELINE = `version: 1
tasks:
  web: { script: [make], changes: [src/**] }
  docs: { script: [make docs], changes: [docs/**] }
`;

const manyCommits = Array.from({ length: 25 }, (_, i) => ({
  id: sha(`c${i}`),
  message: 'm',
  added: [],
  removed: [],
  modified: ['docs/a.md'],
}));

async function pushWide(label: string, files: string[]): Promise<Record<string, Json>> {
  const before = sha(`${label}-before`);
  const afterSha = sha(`${label}-after`);
  e2e.fake.setFile(REPO, afterSha, PIPELINE);
  comparisons.set(`${before}...${afterSha}`, files);
  const payload = {
    ...githubPush(REPO, afterSha, { ref: 'refs/heads/main', before }),
    commits: manyCommits,
  };
  const hook = await sendWebhook(stack, 'github', 'push', payload, { secret: project.secret });
  assert.equal(hook.status, 202, hook.text);
  return waitForJob(stack, hook.body.job_id);
}

const states = (view: Record<string, Json>) =>
  Object.fromEntries(view.tasks.map((t: Json) => [t.name, t.state]));

test('a comparison paged past 300 files is read to its last page: a file on page 4 runs its task', async () => {
  const files = [...Array.from({ length: 340 }, (_, i) => `docs/page-${i}.md`), 'src/late.ts'];
  const view = await pushWide('paged', files);
  assert.deepEqual(states(view), { web: 'queued', docs: 'queued' }, JSON.stringify(view.job));
  assert.equal(view.job.diff_count, 341);
  assert.equal(view.job.diff_files.length, 100, 'the job keeps the first 100 to show');
  assert.equal(view.job.diff_note, "from the forge's compare API");
  // The job page lists the first 100 changed files, then counts the rest.
  const page = await stack.call(
    'GET',
    new URL(view.job.page_url).pathname + new URL(view.job.page_url).search,
  );
  assert.equal(page.status, 200, page.text);
  assert.equal((page.text.match(/<li>docs\/page-/g) ?? []).length, 100);
  assert.match(page.text, /data-diff-more>and 241 more</);
  assert.match(
    page.text,
    /<code data-diff-base>[0-9a-f]{12}\.\.[0-9a-f]{12}<\/code>: 341 files changed/,
  );
  const pages = asked.filter((q) => q.includes('paged') || q.includes(sha('paged-after')));
  assert.equal(pages.length, 4, pages.join('\n'));
});

test('without a src file in any page the src task is skipped, with the reason', async () => {
  const view = await pushWide(
    'docs-only',
    Array.from({ length: 250 }, (_, i) => `docs/${i}.md`),
  );
  assert.deepEqual(states(view), { web: 'skipped', docs: 'queued' });
  assert.equal(view.tasks[0].error, 'no changed file matches src/**');
});

test("a page that stops at GitHub's 300-file cap makes the diff unknown: every task runs, and the job says why", async () => {
  perPage = 300;
  try {
    const view = await pushWide(
      'capped',
      Array.from({ length: 300 }, (_, i) => `docs/${i}.md`),
    );
    assert.deepEqual(states(view), { web: 'queued', docs: 'queued' });
    assert.equal(view.job.diff_base, null);
    assert.match(view.job.diff_note, /stops at 300 files, its cap, so some may be missing/);
  } finally {
    perPage = 100;
  }
});

test('a comparison naming more files than Conductor keeps makes the diff unknown: every task runs, and the job page says why', async () => {
  // MAX_COMPARE_FILES + 1 names, none under src/: were they kept, `web` would be skipped.
  perPage = 250;
  try {
    const files = Array.from({ length: MAX_COMPARE_FILES + 1 }, (_, i) => `docs/n-${i}.md`);
    const view = await pushWide('too-many', files);
    assert.deepEqual(states(view), { web: 'queued', docs: 'queued' });
    assert.equal(view.job.diff_base, null);
    assert.equal(view.job.diff_count, null);
    assert.match(view.job.diff_note, /changes more than 20000 files, more than Conductor keeps/);
    const page = await stack.call(
      'GET',
      new URL(view.job.page_url).pathname + new URL(view.job.page_url).search,
    );
    assert.match(
      page.text,
      /data-diff-unknown>The diff is unknown, so every task ran: the comparison of [0-9a-f]+\.\.\.[0-9a-f]+ changes more than 20000 files/,
    );
    const pages = asked.filter((q) => q.includes(sha('too-many-after')));
    assert.equal(pages.length, Math.ceil((MAX_COMPARE_FILES + 1) / 250), 'no page past the cap');
  } finally {
    perPage = 100;
  }
});

test('a comparison whose file names are longer in all than Conductor keeps makes the diff unknown', async () => {
  const long = (c: string) => `docs/${c.repeat(MAX_COMPARE_CHARS / 2)}`;
  const view = await pushWide('too-long', [long('a'), long('b'), 'src/x.ts']);
  assert.deepEqual(states(view), { web: 'queued', docs: 'queued' });
  assert.equal(view.job.diff_base, null);
  assert.match(view.job.diff_note, /changes more than 4000000 characters of file names/);
});

test('a comparison the forge refuses (404) makes the diff unknown and every task runs', async () => {
  const before = sha('gone-before');
  const afterSha = sha('gone-after');
  e2e.fake.setFile(REPO, afterSha, PIPELINE);
  const payload = {
    ...githubPush(REPO, afterSha, { ref: 'refs/heads/main', before }),
    commits: manyCommits,
  };
  const hook = await sendWebhook(stack, 'github', 'push', payload, { secret: project.secret });
  const view = await waitForJob(stack, hook.body.job_id);
  assert.deepEqual(states(view), { web: 'queued', docs: 'queued' });
  assert.match(view.job.diff_note, /answered HTTP 404 asking for the compare API of acme\/wide/);
});

test("Gitea: a push whose payload lists fewer commits than total_commits is compared by Gitea's compare API, page after page", async () => {
  const gitea = await e2e.addProject({
    forge: 'gitea',
    id: 'wide-gitea',
    repo: 'harbor/wide',
    cancel_superseded: false,
    forge_url: compareUrl,
    forge_token: 'gt_t',
  });
  const before = sha('gitea-before');
  const afterSha = sha('gitea-after');
  e2e.fake.setFile('harbor/wide', afterSha, PIPELINE);
  comparisons.set(`${before}...${afterSha}`, [
    ...Array.from({ length: 120 }, (_, i) => `docs/g${i}.md`),
    'src/gitea.ts',
  ]);
  // One commit listed of 40: the list is not the whole push.
  const payload = { ...giteaPush('harbor/wide', afterSha, { before }), total_commits: 40 };
  const hook = await sendWebhook(stack, 'gitea', 'push', payload, { secret: gitea.secret });
  assert.equal(hook.status, 202, hook.text);
  const view = await waitForJob(stack, hook.body.job_id);
  assert.deepEqual(states(view), { web: 'queued', docs: 'queued' }, JSON.stringify(view.job));
  assert.equal(view.job.diff_count, 121);
  assert.ok(
    asked.some((q) => q.startsWith('/api/v1/repos/harbor/wide/compare/') && q.includes('page=2')),
  );
});
