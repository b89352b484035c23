// GitHub (github.com, or GitHub Enterprise Server under its /api/v3) as a Forge: its REST API
// under CONDUCTOR_GITHUB_API_URL, `Bearer` tokens, the X-GitHub-* webhook headers with an
// `sha256=` HMAC. The GitHub App (installation tokens, check runs) will live beside this file.
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
import { hmac, isPlainObject, pastableUrl, readPushDiffOf, verifyHmac } from '../payload.ts';
import { hubDefaultBranch, hubRepository, parseHubWebhook } from './webhook.ts';

// The REST API version this client was written against; GitHub answers it with that behaviour.
const API_VERSION = '2022-11-28';

// GitHub lists at most this many files for a whole comparison (on its first page); a
// comparison that reaches it may have more, so it is not trusted as complete.
const FILE_CAP = 300;

const SIGNATURE = /^sha256=([0-9a-fA-F]{64})$/;

/** Names and renamed-from names in a GitHub or Gitea compare `files` list; null when it is not one. */
export function fileNames(list: unknown, renamedFrom: string | null): string[] | null {
  if (!Array.isArray(list)) return null;
  const out: string[] = [];
  for (const item of list) {
    const name = (item as { filename?: unknown } | null)?.filename;
    if (typeof name !== 'string') return null;
    out.push(name);
    // A rename changes its old path too: a filter on the old place must see it.
    const old = renamedFrom ? (item as Record<string, unknown>)[renamedFrom] : undefined;
    if (typeof old === 'string' && old !== '') out.push(old);
  }
  return out;
}

/** The permission in a `collaborators/{login}/permission` answer (GitHub's and Gitea's). */
export function collaboratorPermission(body: unknown): 'none' | 'read' | 'write' | 'admin' | null {
  const permission = isPlainObject(body) ? body.permission : undefined;
  switch (typeof permission === 'string' ? permission.toLowerCase() : null) {
    case 'owner':
    case 'admin':
      return 'admin';
    case 'write':
      return 'write';
    case 'read':
      return 'read';
    case 'none':
      return 'none';
    default:
      return null;
  }
}

export const github: Forge = {
  kind: 'github',
  title: 'GitHub',
  repoShape: 'owner/name',
  isRepo: (repo) => /^[^/]+\/[^/]+$/.test(repo),
  forgeUrl: { required: false },
  apiBase: (urls) => urls.githubApiUrl.replace(/\/+$/, ''),
  headers(token, accept = 'application/vnd.github+json') {
    const headers: Record<string, string> = {
      Accept: accept,
      'User-Agent': USER_AGENT,
      'X-GitHub-Api-Version': API_VERSION,
    };
    if (token) headers.Authorization = `Bearer ${token}`;
    return headers;
  },
  webhook: {
    headers: {
      event: 'X-GitHub-Event',
      delivery: 'X-GitHub-Delivery',
      signature: 'X-Hub-Signature-256',
    },
    aliases: [],
    verify: (rawBody, secret, header) => verifyHmac(rawBody, secret, header, SIGNATURE),
    sign: (rawBody, secret) => `sha256=${hmac(rawBody, secret).toString('hex')}`,
    parse: (event, payload) => parseHubWebhook(event, payload, { agit: false }),
    pushDiff: (payload) => readPushDiffOf(payload, null),
    defaultBranch: hubDefaultBranch,
    contentTypeSetting: '"Content type"',
    describe: (payload) => ({ cloneUrl: pastableUrl(hubRepository(payload)?.clone_url) }),
  },
  // The raw media type answers the file's bytes instead of base64 inside JSON.
  file: (api, repo, sha, path) => ({
    url: `${api}/repos/${pathOf(repo)}/contents/${pathOf(path)}?ref=${encodeURIComponent(sha)}`,
    accept: 'application/vnd.github.raw+json',
  }),
  status: repoStatusRequest,
  compare: {
    page: (api, repo, base, head, page) => ({
      url: `${api}/repos/${pathOf(repo)}/compare/${basehead(base, head)}?per_page=100&page=${page}`,
    }),
    files(body) {
      const list = (body as { files?: unknown } | null)?.files;
      // A page past the first may carry no files at all.
      return list === undefined ? [] : fileNames(list, 'previous_filename');
    },
    incomplete: (_body, pageFiles) =>
      pageFiles >= FILE_CAP ? `stops at ${pageFiles} files, its cap, so some may be missing` : null,
  },
  branch: {
    // commits/{ref} takes `heads/x` and `tags/x` alike and answers the commit (a tag's target).
    head: (api, repo, name, isTag) => ({
      url: `${api}/repos/${pathOf(repo)}/commits/${isTag ? 'tags' : 'heads'}/${encodeURIComponent(name)}`,
    }),
    sha: (body) => (body as { sha?: unknown } | null)?.sha,
    repository: hubRepositoryRequest,
  },
  permission: {
    ask: hubPermissionRequest,
    read: (body) => collaboratorPermission(body),
    confirmsWriters: false,
  },
  oauth: {
    settings: {
      url: 'CONDUCTOR_GITHUB_OAUTH_URL',
      clientId: 'CONDUCTOR_GITHUB_CLIENT_ID',
      clientSecret: 'CONDUCTOR_GITHUB_CLIENT_SECRET',
    },
    store: {
      url: 'github_oauth_url',
      clientId: 'github_client_id',
      clientSecret: 'github_client_secret',
    },
    defaultUrl: 'https://github.com',
    scope: '',
    authorizeUrl: (base) => `${base}/login/oauth/authorize`,
    tokenUrl: (base) => `${base}/login/oauth/access_token`,
    // Set apart: GitHub's API base is configuration (lib/app/people.ts hands it in).
    apiUrl: (base) => base,
    login: (body) => (body as { login?: unknown } | null)?.login,
  },
  hooks: hubHooks({ name: 'web' }, { insecure_ssl: '0' }),
  repos: {
    list: (api, page, perPage) => ({
      url: `${api}/user/repos?per_page=${perPage}&page=${page}&sort=full_name`,
    }),
    read: readRepoListing,
  },
};
