// Gitea (and Forgejo, which speaks its API and webhook dialect under X-Forgejo-* header names)
// as a Forge: its API under the project's forge_url + /api/v1, `token` auth, GitHub's webhook
// payloads with a bare hex HMAC, and pull requests from the base repository that wait for Gitea
// to confirm their people as writers (anyone who reads may open one with the AGit flow).
import {
  basehead,
  type Forge,
  hubHooks,
  hubPermissionRequest,
  hubRepositoryRequest,
  pathOf,
  readRepoListing,
  repoStatusRequest,
  USER_AGENT,
} from '../forge.ts';
import { collaboratorPermission, fileNames } from '../github/index.ts';
import { hubDefaultBranch, hubRepository, parseHubWebhook } from '../github/webhook.ts';
import { hmac, pastableUrl, readPushDiffOf, verifyHmac } from '../payload.ts';

const SIGNATURE = /^([0-9a-fA-F]{64})$/;

export const gitea: Forge = {
  kind: 'gitea',
  title: 'Gitea',
  repoShape: 'owner/name',
  isRepo: (repo) => /^[^/]+\/[^/]+$/.test(repo),
  forgeUrl: { required: true },
  apiBase: (urls) => (urls.forgeUrl ? `${urls.forgeUrl.replace(/\/+$/, '')}/api/v1` : null),
  headers(token, accept = 'application/json') {
    const headers: Record<string, string> = { Accept: accept, 'User-Agent': USER_AGENT };
    if (token) headers.Authorization = `token ${token}`;
    return headers;
  },
  webhook: {
    headers: {
      event: 'X-Gitea-Event',
      delivery: 'X-Gitea-Delivery',
      signature: 'X-Gitea-Signature',
    },
    // Forgejo sends the Gitea dialect (same payloads, same hex HMAC-SHA256) under its own names.
    aliases: [
      {
        event: 'X-Forgejo-Event',
        delivery: 'X-Forgejo-Delivery',
        signature: 'X-Forgejo-Signature',
      },
    ],
    verify: (rawBody, secret, header) => verifyHmac(rawBody, secret, header, SIGNATURE),
    sign: (rawBody, secret) => hmac(rawBody, secret).toString('hex'),
    parse: (event, payload) => parseHubWebhook(event, payload, { agit: true }),
    // Gitea caps the commits list (its feed setting) and says how many there were.
    pushDiff: (payload) => readPushDiffOf(payload, 'total_commits'),
    defaultBranch: hubDefaultBranch,
    contentTypeSetting: '"POST Content Type"',
    describe(payload, repo) {
      const repository = hubRepository(payload);
      // Gitea's html_url is <base URL>/<owner>/<name>.
      const page = pastableUrl(repository?.html_url);
      const base = page?.toLowerCase().endsWith(`/${repo.toLowerCase()}`)
        ? page.slice(0, -(repo.length + 1))
        : undefined;
      return {
        cloneUrl: pastableUrl(repository?.clone_url),
        ...(base ? { forgeUrl: base } : {}),
      };
    },
  },
  file: (api, repo, sha, path) => ({
    url: `${api}/repos/${pathOf(repo)}/raw/${pathOf(path)}?ref=${encodeURIComponent(sha)}`,
    accept: '*/*',
  }),
  status: repoStatusRequest,
  compare: {
    page: (api, repo, base, head, page) => ({
      url: `${api}/repos/${pathOf(repo)}/compare/${basehead(base, head)}?limit=50&page=${page}`,
    }),
    files(body) {
      const top = (body as { files?: unknown } | null)?.files;
      if (top !== undefined) return fileNames(top, 'previous_filename');
      // Older Gitea answers the commits, each with the files it touched.
      const commits = (body as { commits?: unknown } | null)?.commits;
      if (!Array.isArray(commits)) return null;
      const out: string[] = [];
      for (const commit of commits) {
        const files = fileNames((commit as { files?: unknown } | null)?.files ?? [], null);
        if (files === null) return null;
        out.push(...files);
      }
      return out;
    },
    incomplete: () => null,
  },
  branch: {
    head: (api, repo, name, isTag) => ({
      url: `${api}/repos/${pathOf(repo)}/${isTag ? 'tags' : 'branches'}/${encodeURIComponent(name)}`,
    }),
    sha: (body) =>
      (body as { commit?: { id?: unknown; sha?: unknown } } | null)?.commit?.id ??
      (body as { commit?: { sha?: unknown } } | null)?.commit?.sha,
    repository: hubRepositoryRequest,
  },
  permission: {
    // Gitea answers this only to a site administrator, a repository administrator, or the user
    // asked about: `{"permission": "none" | "read" | "write" | "admin" | "owner", ...}`.
    ask: hubPermissionRequest,
    read: (body) => collaboratorPermission(body),
    confirmsWriters: true,
  },
  oauth: {
    settings: {
      url: 'CONDUCTOR_GITEA_URL',
      clientId: 'CONDUCTOR_GITEA_CLIENT_ID',
      clientSecret: 'CONDUCTOR_GITEA_CLIENT_SECRET',
    },
    store: { url: 'gitea_url', clientId: 'gitea_client_id', clientSecret: 'gitea_client_secret' },
    scope: 'read:user',
    authorizeUrl: (base) => `${base}/login/oauth/authorize`,
    tokenUrl: (base) => `${base}/login/oauth/access_token`,
    apiUrl: (base) => `${base}/api/v1`,
    login: (body) => (body as { login?: unknown } | null)?.login,
  },
  hooks: hubHooks({ type: 'gitea' }),
  repos: {
    list: (api, page, perPage) => ({
      // Gitea pages with `limit`, not `per_page`.
      url: `${api}/user/repos?limit=${perPage}&page=${page}`,
    }),
    read: readRepoListing,
  },
};
