// GitLab (gitlab.com or self-managed, the project's forge_url) as a Forge: REST API v4 under
// <forge_url>/api/v4 with the project named by its URL-encoded full path, `Bearer` tokens
// (personal, project or group access tokens, and OAuth tokens alike), webhooks that carry the
// project's secret itself in `X-Gitlab-Token`, and permission read from the project's members.
import { createHash, timingSafeEqual } from 'node:crypto';
import { type Forge, type RepoPermission, USER_AGENT } from '../forge.ts';
import { isPlainObject, pastableUrl, readPushDiffOf } from '../payload.ts';
import { gitlabDefaultBranch, parseGitlabWebhook } from './webhook.ts';

export const GITLAB_COM = 'https://gitlab.com';

/** `group/sub/name` as one path segment, as GitLab's API names a project. */
const project = (api: string, repo: string) => `${api}/projects/${encodeURIComponent(repo)}`;

/**
 * GitLab's role (a member's `access_level`) as what Conductor lets a person do: the one place
 * the mapping lives (docs/architecture.md, "GitLab"). Reporter reads the code and pipelines;
 * Developer pushes branches; Maintainer and Owner administer the project. Guest, Planner and
 * Minimal access cannot read a private project's code, so they are no access here.
 */
export const GITLAB_ACCESS: readonly { min: number; role: string; permission: RepoPermission }[] = [
  { min: 40, role: 'Maintainer, Owner', permission: 'admin' },
  { min: 30, role: 'Developer', permission: 'write' },
  { min: 20, role: 'Reporter', permission: 'read' },
  { min: 0, role: 'Guest, Planner, Minimal access', permission: 'none' },
];

/** The permission for a GitLab access level. */
export function accessPermission(level: number): RepoPermission {
  return GITLAB_ACCESS.find((a) => level >= a.min)?.permission ?? 'none';
}

/**
 * GitLab's commit status for Conductor's. GitLab has no `error` and moves a status through
 * pending → running → success | failed | canceled; Conductor's pending statuses that say the
 * job runs (`running 3 tasks`, `... unblocked by @x; running`) are `running` there, and an
 * error that says the job was cancelled or declined is `canceled`.
 */
export function gitlabState(state: string, description: string): string {
  switch (state) {
    case 'pending':
      return /(^|; )running\b/.test(description) ? 'running' : 'pending';
    case 'success':
    case 'warning':
      return 'success';
    case 'error':
      return /^(cancelled|declined)\b/.test(description) ? 'canceled' : 'failed';
    default:
      return 'failed';
  }
}

// GitLab's default diff_max_files: a comparison that reaches it lists no more.
const DIFF_MAX_FILES = 1000;

/** The constant-time comparison of the token GitLab sends with the project's secret. */
function sameToken(given: string | undefined, secret: string): boolean {
  // An empty secret proves nothing: anyone can send an empty header.
  if (given === undefined || secret === '') return false;
  // Hashed first so that the comparison takes the same time whatever the lengths.
  const a = createHash('sha256').update(given.trim(), 'utf8').digest();
  const b = createHash('sha256').update(secret, 'utf8').digest();
  return timingSafeEqual(a, b);
}

export const gitlab: Forge = {
  kind: 'gitlab',
  title: 'GitLab',
  repoShape: 'group/sub/name',
  isRepo: (repo) => /^[^/]+(\/[^/]+)+$/.test(repo),
  forgeUrl: { required: false, default: GITLAB_COM },
  apiBase: (urls) => `${(urls.forgeUrl ?? GITLAB_COM).replace(/\/+$/, '')}/api/v4`,
  headers(token, accept = 'application/json') {
    const headers: Record<string, string> = { Accept: accept, 'User-Agent': USER_AGENT };
    if (token) headers.Authorization = `Bearer ${token}`;
    return headers;
  },
  webhook: {
    headers: {
      event: 'X-Gitlab-Event',
      delivery: 'X-Gitlab-Event-UUID',
      signature: 'X-Gitlab-Token',
    },
    // GitLab 17.4 and later also send Idempotency-Key, the same on each retry of a delivery.
    aliases: [
      { event: 'X-Gitlab-Event', delivery: 'Idempotency-Key', signature: 'X-Gitlab-Token' },
    ],
    verify: (_rawBody, secret, header) => sameToken(header, secret),
    sign: (_rawBody, secret) => secret,
    parse: parseGitlabWebhook,
    // GitLab lists at most 20 commits and says how many the push had.
    pushDiff: (payload) => readPushDiffOf(payload, 'total_commits_count'),
    defaultBranch: gitlabDefaultBranch,
    contentTypeSetting: 'content type',
    describe(payload, repo) {
      const p = isPlainObject(payload) && isPlainObject(payload.project) ? payload.project : {};
      // web_url is <base URL>/<group>/<name>.
      const page = pastableUrl(p.web_url);
      const base = page?.toLowerCase().endsWith(`/${repo.toLowerCase()}`)
        ? page.slice(0, -(repo.length + 1))
        : undefined;
      return {
        cloneUrl: pastableUrl(p.git_http_url),
        ...(base && base !== GITLAB_COM ? { forgeUrl: base } : {}),
      };
    },
  },
  // The repository files API: the path is one segment, its slashes encoded.
  file: (api, repo, sha, path) => ({
    url: `${project(api, repo)}/repository/files/${encodeURIComponent(path)}/raw?ref=${encodeURIComponent(sha)}`,
    accept: '*/*',
  }),
  status: (api, repo, sha, s) => ({
    method: 'POST',
    url: `${project(api, repo)}/statuses/${sha}`,
    body: {
      state: gitlabState(s.state, s.description),
      name: s.context,
      description: s.description,
      ...(s.targetUrl ? { target_url: s.targetUrl } : {}),
    },
  }),
  compare: {
    // One answer, not paged: `straight=false` compares from the merge base (base...head).
    page: (api, repo, base, head) => ({
      url: `${project(api, repo)}/repository/compare?from=${encodeURIComponent(base)}&to=${encodeURIComponent(head)}&straight=false`,
    }),
    files(body) {
      const diffs = (body as { diffs?: unknown } | null)?.diffs;
      if (!Array.isArray(diffs)) return null;
      const out: string[] = [];
      for (const diff of diffs) {
        const d = isPlainObject(diff) ? diff : {};
        if (typeof d.new_path !== 'string') return null;
        out.push(d.new_path);
        // A rename or deletion changes its old path too.
        if (typeof d.old_path === 'string' && d.old_path !== d.new_path) out.push(d.old_path);
      }
      return out;
    },
    incomplete(body, pageFiles) {
      if ((body as { compare_timeout?: unknown } | null)?.compare_timeout === true) {
        return 'timed out at GitLab, so some files may be missing';
      }
      const diffs = (body as { diffs?: unknown[] } | null)?.diffs?.length ?? pageFiles;
      return diffs >= DIFF_MAX_FILES
        ? `stops at ${diffs} files, GitLab's diff_max_files, so some may be missing`
        : null;
    },
  },
  branch: {
    head: (api, repo, name, isTag) => ({
      url: `${project(api, repo)}/repository/${isTag ? 'tags' : 'branches'}/${encodeURIComponent(name)}`,
    }),
    sha: (body) => (body as { commit?: { id?: unknown } } | null)?.commit?.id,
    repository: (api, repo) => ({ url: project(api, repo) }),
  },
  permission: {
    // Members with inherited and invited groups' members; `query` matches the username among
    // others, so the answer is searched for the exact one.
    ask: (api, repo, login) => ({
      url: `${project(api, repo)}/members/all?query=${encodeURIComponent(login)}&per_page=100`,
    }),
    read(body, login) {
      if (!Array.isArray(body)) return null;
      const member = body.find(
        (m) =>
          isPlainObject(m) &&
          typeof m.username === 'string' &&
          m.username.toLowerCase() === login.toLowerCase(),
      ) as Record<string, unknown> | undefined;
      if (member === undefined) return 'none';
      return typeof member.access_level === 'number' ? accessPermission(member.access_level) : null;
    },
    confirmsWriters: false,
  },
  oauth: {
    settings: {
      url: 'CONDUCTOR_GITLAB_URL',
      clientId: 'CONDUCTOR_GITLAB_CLIENT_ID',
      clientSecret: 'CONDUCTOR_GITLAB_CLIENT_SECRET',
    },
    store: {
      url: 'gitlab_url',
      clientId: 'gitlab_client_id',
      clientSecret: 'gitlab_client_secret',
    },
    defaultUrl: GITLAB_COM,
    scope: 'read_user',
    authorizeUrl: (base) => `${base}/oauth/authorize`,
    tokenUrl: (base) => `${base}/oauth/token`,
    apiUrl: (base) => `${base}/api/v4`,
    login: (body) => (body as { username?: unknown } | null)?.username,
  },
  hooks: {
    create: (api, repo, hook) => ({
      method: 'POST',
      url: `${project(api, repo)}/hooks`,
      body: {
        url: hook.url,
        token: hook.secret,
        push_events: true,
        tag_push_events: true,
        merge_requests_events: true,
        enable_ssl_verification: true,
      },
    }),
    id: (body) => (body as { id?: unknown } | null)?.id,
    delete: (api, repo, id) => ({
      method: 'DELETE',
      url: `${project(api, repo)}/hooks/${encodeURIComponent(id)}`,
    }),
  },
  repos: {
    // Projects the token may administer (Maintainer and up: webhooks need it).
    list: (api, page, perPage) => ({
      url: `${api}/projects?min_access_level=40&per_page=${perPage}&page=${page}&order_by=path&sort=asc`,
    }),
    read: (body) => {
      const p = body as {
        path_with_namespace?: unknown;
        http_url_to_repo?: unknown;
        visibility?: unknown;
        permissions?: {
          project_access?: { access_level?: unknown } | null;
          group_access?: { access_level?: unknown } | null;
        } | null;
      } | null;
      if (
        !p ||
        typeof p.path_with_namespace !== 'string' ||
        typeof p.http_url_to_repo !== 'string'
      ) {
        return null;
      }
      const level = Math.max(
        Number(p.permissions?.project_access?.access_level ?? 0) || 0,
        Number(p.permissions?.group_access?.access_level ?? 0) || 0,
      );
      return {
        repo: p.path_with_namespace,
        cloneUrl: p.http_url_to_repo,
        private: p.visibility !== 'public',
        admin: accessPermission(level) === 'admin',
      };
    },
  },
};
