// A fake GitLab on loopback for the GitLab tests: the REST API v4 routes Conductor uses and
// the OAuth application's endpoints, each checking what GitLab checks.
//
//   GET    /api/v4/projects/:id/repository/files/:file_path/raw?ref=   (raw bytes)
//   POST   /api/v4/projects/:id/statuses/:sha     state pending|running|success|failed|canceled
//   GET    /api/v4/projects/:id/repository/compare?from=&to=&straight=
//   GET    /api/v4/projects/:id/repository/branches/:branch, .../tags/:tag
//   GET    /api/v4/projects/:id                        (default_branch)
//   GET    /api/v4/projects/:id/members/all?query=
//   POST   /api/v4/projects/:id/hooks, DELETE /api/v4/projects/:id/hooks/:hook_id
//   GET    /oauth/authorize  → redirects back at once with a code (PKCE S256 kept)
//   POST   /oauth/token      (client secret, redirect_uri, code once, code_verifier)
//   GET    /api/v4/user      (the OAuth token's person)
//
// `:id` is the project's full path URL-encoded as one segment (`group%2Fsub%2Fname`), as
// GitLab requires: a path with bare slashes is not found. Every API call needs
// `Authorization: Bearer <token>` with the project's token (401 otherwise).
import { createHash, randomBytes } from 'node:crypto';
import { createServer, type IncomingMessage, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { after } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';

export const GITLAB_STATES = ['pending', 'running', 'success', 'failed', 'canceled'];

export interface GitlabCall {
  method: string;
  /** The path as sent (still encoded). */
  rawPath: string;
  query: Record<string, string>;
  authorization: string | undefined;
  // biome-ignore lint/suspicious/noExplicitAny: tests read the body field by field
  body: any;
  answered: number;
}

export interface FakeGitlab {
  url: string;
  /** The token the API accepts. */
  token: string;
  calls: GitlabCall[];
  setFile(repo: string, sha: string, text: string, path?: string): void;
  setBranch(repo: string, name: string, sha: string): void;
  setTag(repo: string, name: string, sha: string): void;
  setDefaultBranch(repo: string, name: string): void;
  /** The diffs `compare?from=base&to=head` answers. */
  setCompare(repo: string, base: string, head: string, diffs: object[], extra?: object): void;
  setMember(repo: string, username: string, accessLevel: number): void;
  /** Status posts accepted (201), in order. */
  statusesFor(sha: string): GitlabCall[];
  waitForStatuses(sha: string, count: number): Promise<GitlabCall[]>;
  hooks: Map<number, { repo: string; body: unknown }>;
  // OAuth
  clientId: string;
  clientSecret: string;
  signInAs: { id: number; username: string };
  authorizations: Record<string, string>[];
  tokenRequests: Record<string, string>[];
}

function json(res: ServerResponse, status: number, body: unknown): number {
  res.writeHead(status, { 'content-type': 'application/json' });
  res.end(JSON.stringify(body));
  return status;
}

async function readBody(req: IncomingMessage): Promise<string> {
  const chunks: Buffer[] = [];
  for await (const chunk of req) chunks.push(chunk as Buffer);
  return Buffer.concat(chunks).toString('utf8');
}

const PROJECT = /^\/api\/v4\/projects\/([^/]+)(\/.*)?$/;

/** Starts the fake on a free loopback port; closed when the test file ends. */
export async function startFakeGitlab(): Promise<FakeGitlab> {
  const files = new Map<string, string>();
  const branches = new Map<string, string>();
  const tags = new Map<string, string>();
  const defaults = new Map<string, string>();
  const compares = new Map<string, { diffs: object[]; extra: object }>();
  const members = new Map<string, { username: string; access_level: number }[]>();
  const codes = new Map<string, { challenge: string; redirect: string; used: boolean }>();
  const personTokens = new Map<string, { id: number; username: string }>();
  const hooks = new Map<number, { repo: string; body: unknown }>();
  let nextHook = 1;
  const calls: GitlabCall[] = [];
  const k = (...parts: string[]) => parts.join('\u0000').toLowerCase();

  async function api(req: IncomingMessage, res: ServerResponse, url: URL, call: GitlabCall) {
    const raw = url.pathname;
    if (raw === '/api/v4/user') {
      const person = personTokens.get((call.authorization ?? '').replace(/^Bearer /, ''));
      return person
        ? json(res, 200, { ...person, name: person.username, state: 'active' })
        : json(res, 401, { message: '401 Unauthorized' });
    }
    const m = PROJECT.exec(raw);
    // GitLab finds a project by its id or its full path encoded as one segment.
    if (!m) return json(res, 404, { error: '404 Not Found' });
    if (call.authorization !== `Bearer ${fake.token}`) {
      return json(res, 401, { message: '401 Unauthorized' });
    }
    const repo = decodeURIComponent(m[1]!);
    const rest = m[2] ?? '';
    const q = call.query;
    if (req.method === 'GET' && rest === '') {
      return json(res, 200, {
        id: 15,
        path_with_namespace: repo,
        default_branch: defaults.get(k(repo)) ?? 'main',
      });
    }
    const file = /^\/repository\/files\/([^/]+)\/raw$/.exec(rest);
    if (req.method === 'GET' && file) {
      const text = files.get(k(repo, q.ref ?? '', decodeURIComponent(file[1]!)));
      if (text === undefined) return json(res, 404, { message: '404 File Not Found' });
      res.writeHead(200, { 'content-type': 'text/plain; charset=utf-8' });
      res.end(text);
      return 200;
    }
    const status = /^\/statuses\/([0-9a-f]+)$/.exec(rest);
    if (req.method === 'POST' && status) {
      const b = call.body;
      if (!b || !GITLAB_STATES.includes(b.state)) {
        return json(res, 400, { error: 'state does not have a valid value' });
      }
      return json(res, 201, {
        id: calls.length,
        sha: status[1],
        status: b.state,
        name: b.name ?? 'default',
        target_url: b.target_url ?? null,
        description: b.description ?? null,
      });
    }
    if (req.method === 'GET' && rest === '/repository/compare') {
      const found = compares.get(k(repo, q.from ?? '', q.to ?? ''));
      if (!found) return json(res, 404, { message: '404 Ref Not Found' });
      return json(res, 200, {
        commit: null,
        commits: [],
        diffs: found.diffs,
        compare_timeout: false,
        compare_same_ref: false,
        ...found.extra,
      });
    }
    const head = /^\/repository\/(branches|tags)\/([^/]+)$/.exec(rest);
    if (req.method === 'GET' && head) {
      const name = decodeURIComponent(head[2]!);
      const sha = (head[1] === 'tags' ? tags : branches).get(k(repo, name));
      if (!sha) return json(res, 404, { message: '404 Branch Not Found' });
      return json(res, 200, { name, commit: { id: sha, short_id: sha.slice(0, 8) } });
    }
    if (req.method === 'GET' && rest === '/members/all') {
      const query = (q.query ?? '').toLowerCase();
      const list = (members.get(k(repo)) ?? []).filter(
        (mm) => query === '' || mm.username.toLowerCase().includes(query),
      );
      return json(
        res,
        200,
        list.map((mm, i) => ({ id: 100 + i, ...mm, name: mm.username, state: 'active' })),
      );
    }
    if (req.method === 'POST' && rest === '/hooks') {
      const id = nextHook++;
      hooks.set(id, { repo, body: call.body });
      return json(res, 201, { id, url: call.body?.url, push_events: true });
    }
    const hook = /^\/hooks\/(\d+)$/.exec(rest);
    if (req.method === 'DELETE' && hook) {
      if (!hooks.delete(Number(hook[1]))) return json(res, 404, { message: '404 Not Found' });
      res.writeHead(204).end();
      return 204;
    }
    return json(res, 404, { error: '404 Not Found' });
  }

  function oauth(res: ServerResponse, url: URL, call: GitlabCall): number {
    if (url.pathname === '/oauth/authorize') {
      const q = call.query;
      fake.authorizations.push(q);
      if (q.client_id !== fake.clientId || q.code_challenge_method !== 'S256') {
        return json(res, 400, { error: 'invalid_request' });
      }
      const code = randomBytes(8).toString('hex');
      codes.set(code, { challenge: q.code_challenge!, redirect: q.redirect_uri!, used: false });
      const back = new URL(q.redirect_uri!);
      back.searchParams.set('code', code);
      back.searchParams.set('state', q.state ?? '');
      res.writeHead(302, { location: back.href });
      res.end();
      return 302;
    }
    const form = Object.fromEntries(new URLSearchParams(String(call.body ?? '')));
    fake.tokenRequests.push(form);
    const kept = codes.get(form.code ?? '');
    const verifier = createHash('sha256')
      .update(form.code_verifier ?? '')
      .digest('base64url');
    if (
      form.client_id !== fake.clientId ||
      form.client_secret !== fake.clientSecret ||
      !kept ||
      kept.used ||
      kept.redirect !== form.redirect_uri ||
      kept.challenge !== verifier
    ) {
      return json(res, 400, {
        error: 'invalid_grant',
        error_description: 'The provided authorization grant is invalid',
      });
    }
    kept.used = true;
    const token = randomBytes(16).toString('hex');
    personTokens.set(token, { ...fake.signInAs });
    return json(res, 200, {
      access_token: token,
      token_type: 'Bearer',
      expires_in: 7200,
      scope: 'read_user',
      created_at: 0,
    });
  }

  const server = createServer((req, res) => {
    const url = new URL(req.url ?? '/', 'http://fake-gitlab');
    readBody(req)
      .then(async (text) => {
        let body: unknown = text;
        if (String(req.headers['content-type'] ?? '').includes('json')) {
          try {
            body = JSON.parse(text);
          } catch {
            body = null;
          }
        }
        const call: GitlabCall = {
          method: req.method ?? 'GET',
          rawPath: url.pathname,
          query: Object.fromEntries(url.searchParams),
          authorization: req.headers.authorization,
          body,
          answered: 0,
        };
        calls.push(call);
        call.answered =
          url.pathname === '/oauth/authorize' ||
          (url.pathname === '/oauth/token' && req.method === 'POST')
            ? oauth(res, url, call)
            : await api(req, res, url, call);
      })
      .catch(() => res.socket?.destroy());
  });
  await new Promise<void>((done) => server.listen(0, '127.0.0.1', done));
  const close = () =>
    new Promise<void>((done) => {
      server.closeAllConnections();
      server.close(() => done());
    });
  after(close);
  const url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  const fake: FakeGitlab = {
    url,
    token: 'glpat-fake-project-token',
    calls,
    setFile: (repo, sha, text, path = '.conductor.yml') => files.set(k(repo, sha, path), text),
    setBranch: (repo, name, sha) => branches.set(k(repo, name), sha),
    setTag: (repo, name, sha) => tags.set(k(repo, name), sha),
    setDefaultBranch: (repo, name) => defaults.set(k(repo), name),
    setCompare: (repo, base, head, diffs, extra = {}) =>
      compares.set(k(repo, base, head), { diffs, extra }),
    setMember(repo, username, accessLevel) {
      const list = members.get(k(repo)) ?? [];
      list.push({ username, access_level: accessLevel });
      members.set(k(repo), list);
    },
    statusesFor: (sha) =>
      calls.filter(
        (c) => c.method === 'POST' && c.rawPath.endsWith(`/statuses/${sha}`) && c.answered === 201,
      ),
    async waitForStatuses(sha, count) {
      // A deadline for a loaded machine, not a speed claim.
      const deadline = Date.now() + 30_000;
      for (;;) {
        const seen = fake.statusesFor(sha);
        if (seen.length >= count) return seen;
        if (Date.now() > deadline) {
          throw new Error(
            `expected ${count} statuses for ${sha}, got ${JSON.stringify(seen.map((s) => s.body))}`,
          );
        }
        await sleep(10);
      }
    },
    hooks,
    clientId: 'gitlab-app-id',
    clientSecret: 'gitlab-app-secret',
    signInAs: { id: 7, username: 'jsmith' },
    authorizations: [],
    tokenRequests: [],
  };
  return fake;
}
