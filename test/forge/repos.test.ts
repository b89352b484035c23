// The repositories a token can see (lib/forge/repos.ts, for adding a project from the page):
// GitHub's and Gitea's list paged as each forge pages it, the token's admin flag read, a wrong
// token a reason rather than a list, one repository read or not known; GitLab's project read.
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { allowPrivateForges } from '../../lib/forge/client.ts';
import { forgeOf } from '../../lib/forge/registry.ts';
import { listRepositories, readRepository } from '../../lib/forge/repos.ts';
import { type FakeForge, startFakeForge } from '../helpers/fake-forge.ts';

allowPrivateForges(true);
const fake: FakeForge = await startFakeForge();
fake.repositoryToken = 'repos-token-0123456789';
before(() => {
  for (let i = 0; i < 60; i++) {
    fake.addRepository(`acme/r${String(i).padStart(2, '0')}`, {
      admin: i % 2 === 0,
      private: i > 0,
    });
  }
});
after(() => allowPrivateForges(false));

test("GitHub's list is paged by per_page, and each repository says whether the token administers it", async () => {
  const { repos, truncated, reason } = await listRepositories({
    forge: 'github',
    api: fake.url,
    token: fake.repositoryToken,
  });
  assert.equal(reason, null);
  assert.equal(truncated, false);
  assert.equal(repos.length, 60);
  assert.deepEqual(repos[0], {
    repo: 'acme/r00',
    cloneUrl: `${fake.url}/acme/r00.git`,
    private: false,
    admin: true,
  });
  assert.equal(repos[1]!.admin, false);
  // Two pages of 50: each repository once.
  assert.equal(new Set(repos.map((r) => r.repo)).size, 60);
});

test("Gitea's list is paged by limit under /api/v1; a wrong token is a reason, not a list", async () => {
  const api = forgeOf('gitea').apiBase({ githubApiUrl: '', forgeUrl: fake.url })!;
  const listed = await listRepositories({ forge: 'gitea', api, token: fake.repositoryToken });
  assert.equal(listed.repos.length, 60);
  assert.equal(listed.repos.filter((r) => r.admin).length, 30);
  const refused = await listRepositories({ forge: 'gitea', api, token: 'not-the-token' });
  assert.deepEqual(refused.repos, []);
  assert.match(refused.reason ?? '', /Gitea answered HTTP 401/);
});

test('one repository is read, and one the token cannot see is said to be unknown', async () => {
  const api = forgeOf('gitea').apiBase({ githubApiUrl: '', forgeUrl: fake.url })!;
  const found = await readRepository({
    forge: 'gitea',
    api,
    token: fake.repositoryToken,
    repo: 'acme/r02',
  });
  assert.deepEqual(found, {
    ok: true,
    repo: { repo: 'acme/r02', cloneUrl: `${fake.url}/acme/r02.git`, private: true, admin: true },
  });
  const missing = await readRepository({
    forge: 'gitea',
    api,
    token: fake.repositoryToken,
    repo: 'acme/nope',
  });
  assert.deepEqual(missing, {
    ok: false,
    reason: "Gitea has no repository acme/nope that Conductor's token can see",
  });
});

test("GitLab's project is read with its full path; Maintainer and up administer it", () => {
  const read = forgeOf('gitlab').repos.read;
  const project = (level: number) => ({
    path_with_namespace: 'group/sub/app',
    http_url_to_repo: 'https://gitlab.example/group/sub/app.git',
    visibility: 'internal',
    permissions: { project_access: null, group_access: { access_level: level } },
  });
  assert.deepEqual(read(project(40)), {
    repo: 'group/sub/app',
    cloneUrl: 'https://gitlab.example/group/sub/app.git',
    private: true,
    admin: true,
  });
  assert.equal(read(project(30))?.admin, false);
  assert.equal(read({ name: 'no path' }), null);
});
