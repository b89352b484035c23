// Status badges (issue #29) over plain HTTP: the four states of the latest
// job of a ref, a minute's Cache-Control, anyone for a public project, only
// the signed URL (shown on the project page with its Markdown) for a private
// one, and nothing that says whether a private project exists.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { signBadge } from '../../lib/pages/badge.ts';
import { createJob } from '../../lib/scheduler/index.ts';
import { createProject } from '../e2e/calls.ts';
import { testStack } from '../helpers/stack.ts';

const stack = await testStack(import.meta.filename);
const pool = stack.context.pool;
await createProject(stack, {
  id: 'open',
  name: 'open',
  forge: 'github',
  repo: 'acme/open',
  repo_url: 'https://github.com/acme/open.git',
  visibility: 'public',
});
await createProject(stack, {
  id: 'closed',
  name: 'closed',
  forge: 'github',
  repo: 'acme/closed',
  repo_url: 'https://github.com/acme/closed.git',
});

let n = 0;
/** A job of the project on `ref` in `state`, as the scheduler stores one. */
async function jobIn(project: string, ref: string, state: string) {
  const { job } = await createJob(pool, {
    projectId: project,
    ref,
    sha: (++n).toString(16).padStart(40, '0'),
    trigger: 'push',
    trusted: true,
  });
  await pool.query(
    `update jobs set state = $2,
            finished_at = case when $2 in ('success', 'failed', 'cancelled') then now() end
      where id = $1`,
    [job.id, state],
  );
}

async function badge(path: string) {
  const res = await fetch(`${stack.url}${path}`);
  return { status: res.status, headers: res.headers, text: await res.text() };
}

const stateOf = (svg: string) => /data-badge-state="([a-z]+)"/.exec(svg)?.[1];

test('a public project: none, running, passing, failing, for the ref asked, with a minute of cache', async () => {
  const res = await badge('/projects/open/badge.svg?ref=main');
  assert.equal(res.status, 200);
  assert.equal(res.headers.get('content-type'), 'image/svg+xml; charset=utf-8');
  assert.equal(res.headers.get('cache-control'), 'public, max-age=60');
  assert.match(res.text, /^<svg xmlns="http:\/\/www\.w3\.org\/2000\/svg"/);
  assert.equal(stateOf(res.text), 'none');
  assert.match(res.text, /<title>conductor: none<\/title>/);

  await jobIn('open', 'refs/heads/main', 'running');
  assert.equal(stateOf((await badge('/projects/open/badge.svg?ref=main')).text), 'running');
  await jobIn('open', 'refs/heads/main', 'success');
  assert.equal(stateOf((await badge('/projects/open/badge.svg?ref=main')).text), 'passing');
  await jobIn('open', 'refs/heads/main', 'failed');
  assert.equal(stateOf((await badge('/projects/open/badge.svg?ref=main')).text), 'failing');
  // A cancelled job says nothing of the code: the failure before it shows.
  await jobIn('open', 'refs/heads/main', 'cancelled');
  assert.equal(stateOf((await badge('/projects/open/badge.svg?ref=main')).text), 'failing');
  // Another branch is its own.
  await jobIn('open', 'refs/heads/dev', 'success');
  assert.equal(stateOf((await badge('/projects/open/badge.svg?ref=dev')).text), 'passing');
  assert.equal(
    stateOf((await badge('/projects/open/badge.svg?ref=refs/heads/main')).text),
    'failing',
  );
  assert.equal(stateOf((await badge('/projects/open/badge.svg?ref=nothing')).text), 'none');
});

test('a private project: only the signed badge URL, and a 404 that hides whether it exists', async () => {
  await jobIn('closed', 'refs/heads/main', 'success');
  const plain = await badge('/projects/closed/badge.svg?ref=main');
  const missing = await badge('/projects/no-such/badge.svg?ref=main');
  assert.equal(plain.status, 404);
  assert.equal(missing.status, 404);
  assert.equal(plain.text, missing.text);
  const forged = await badge(`/projects/closed/badge.svg?ref=main&sig=${'A'.repeat(43)}`);
  assert.equal(forged.status, 404);
  // Another project's signature does not open this one.
  const other = signBadge(stack.context.keyring, 'open', 'main');
  assert.equal((await badge(`/projects/closed/badge.svg?ref=main&sig=${other}`)).status, 404);

  const sig = signBadge(stack.context.keyring, 'closed', 'main');
  const signed = await badge(`/projects/closed/badge.svg?ref=main&sig=${sig}`);
  assert.equal(signed.status, 200);
  assert.equal(signed.headers.get('cache-control'), 'private, max-age=60');
  assert.equal(stateOf(signed.text), 'passing');
  // Issue #46: main's link opens main's badge alone, not a pull request's,
  // nor tells a hidden branch from a missing one, nor any branch's latest.
  for (const ref of ['refs/pull/77/head', 'secret-branch', 'no-such-branch', 'refs/heads/main']) {
    const q = new URLSearchParams({ ref, sig });
    const answer = await badge(`/projects/closed/badge.svg?${q}`);
    assert.equal(answer.status, 404, ref);
    assert.equal(answer.text, missing.text, ref);
  }
  assert.equal((await badge(`/projects/closed/badge.svg?sig=${sig}`)).status, 404);
});

test("the project page shows the badge's Markdown: the signed URL to people signed in to a private project", async () => {
  const login = await fetch(`${stack.url}/login`, {
    method: 'POST',
    body: new URLSearchParams({ token: stack.adminToken, next: '/' }),
    redirect: 'manual',
  });
  const cookie = login.headers.getSetCookie()[0]!.split(';')[0]!;
  const page = await (await fetch(`${stack.url}/projects/closed`, { headers: { cookie } })).text();
  const sig = signBadge(stack.context.keyring, 'closed', 'main');
  const markdown = /<pre data-badge-markdown>([^<]*)<\/pre>/.exec(page)?.[1];
  assert.ok(markdown, 'the page shows the Markdown');
  assert.equal(
    markdown.replaceAll('&amp;', '&'),
    `[![conductor](${stack.url}/projects/closed/badge.svg?ref=main&sig=${sig})](${stack.url}/projects/closed)`,
  );
  // The page draws main's badge as it reads now.
  assert.match(page, /<p data-badge><svg [^>]*aria-label="conductor: passing"/);
  // Anyone may read a public project's page: its badge is unsigned.
  const open = await (await fetch(`${stack.url}/projects/open`)).text();
  assert.match(open, /\/projects\/open\/badge\.svg\?ref=main\)/);
  assert.doesNotMatch(open, /sig=/);
  // Reading is not running: no Run form without a session that may run.
  assert.doesNotMatch(open, /data-run-form/);
  // The schedules are listed for readers.
  assert.match(open, /<h2>Schedules<\/h2>/);
});
