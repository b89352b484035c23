// A fake forge for end-to-end tests: a real HTTP server on loopback that serves
// `.conductor.yml` per commit the way GitHub's contents API and Gitea's raw file
// API do, answers Gitea's permission API, records every request for
// assertions, and can be told to fail. With `{ statuses: true }` it also takes
// commit statuses.
//
//   GitHub  GET  /repos/{owner}/{repo}/contents/{path}?ref={sha}
//                raw bytes for `Accept: application/vnd.github.raw(+json)`, else the
//                JSON object with the content in base64, as GitHub answers it
//           POST /repos/{owner}/{repo}/statuses/{sha}              (statuses)
//   Gitea   GET  /api/v1/repos/{owner}/{repo}/raw/{path}?ref={sha}
//           GET  /api/v1/repos/{owner}/{repo}/collaborators/{login}/permission
//           POST /api/v1/repos/{owner}/{repo}/statuses/{sha}       (statuses)
//
// For adding projects from the page (issue #53), GitHub's and Gitea's repository admin API
// (Gitea's under /api/v1), each checking the token given to `repositoryToken`:
//   GET /user/repos (GitHub's per_page, Gitea's limit; page), GET /repos/{owner}/{repo},
//   POST /repos/{owner}/{repo}/hooks (checks the hook's type, URL, content type, events and
//   secret as the forge requires them), DELETE /repos/{owner}/{repo}/hooks/{id}.
//
// A commit it was not given a file for answers 404 with the forge's own error body, and so
// does a login it was not given a permission for. A status post is answered 201 with the
// created status, as both forges do; 422 for a body the forge would refuse (a state it does
// not know, no context); 401 without an Authorization header. Status posts can be failed apart
// from the file reads, and held unanswered until released, so a test can change state while a
// post is in flight.
import {
  createServer,
  type IncomingHttpHeaders,
  type IncomingMessage,
  type Server,
  type ServerResponse,
} from 'node:http';
import type { AddressInfo } from 'node:net';
import { after } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';

export interface ForgeRequest {
  method: string;
  /** The path as sent, percent-decoded. */
  path: string;
  query: Record<string, string>;
  /** Lower-case names, as node:http gives them. */
  headers: IncomingHttpHeaders;
  /** Which API the path belongs to, if any. */
  api: 'github' | 'gitea' | null;
  /** `owner/name` from the path, when the path is one of the file APIs. */
  repo: string | null;
  /** What the fake answered: a status, or `reset` for a dropped connection. */
  answered: number | 'reset';
}

/** How the fake answers while it is "down": a status for every request, or a dropped connection. */
export type Outage = number | 'reset';

export interface FakeForge {
  /** `http://127.0.0.1:<port>`, no trailing slash: GitHub's API base and Gitea's forge_url. */
  url: string;
  /** Every request but the status posts, in order of arrival. */
  requests: ForgeRequest[];
  /** Serves `text` as `path` (default `.conductor.yml`) of `repo` at commit `sha`. */
  setFile(repo: string, sha: string, text: string, path?: string): void;
  /**
   * Answers Gitea's permission API for `login` on `repo`: a permission (`read`, `write`,
   * `admin`, `owner`, `none`) as 200, or a bare HTTP status (403, say).
   */
  setPermission(repo: string, login: string, answer: string | number): void;
  /** Makes every request but the status posts answer `outage` (500 unless given) until `up()`. */
  down(outage?: Outage): void;
  up(): void;
  /** The requests that asked for anything at this commit (`ref=<sha>`). */
  requestsFor(sha: string): ForgeRequest[];
  /** The token the repository admin API takes (`token X` or `Bearer X`); anything else is a 401. */
  repositoryToken: string;
  /** A repository the token sees; `admin`: whether the token administers it (may make hooks). */
  addRepository(repo: string, opts?: { private?: boolean; admin?: boolean }): void;
  /** The webhooks made through the API, by id. */
  hooks: Map<number, FakeHook>;
  /** Set: making a hook answers this status (Gitea's 422 for a hook it will not make). */
  refuseHooks: number | null;
  close(): Promise<void>;
}

/** A webhook made at the fake, as the forge keeps it. */
export interface FakeHook {
  id: number;
  api: 'github' | 'gitea';
  repo: string;
  url: string;
  contentType: string;
  secret: string;
  events: string[];
  /** The Authorization header it was made with. */
  authorization: string | undefined;
}

export interface StatusPost {
  api: 'github' | 'gitea';
  /** The path as sent, percent-decoded. */
  path: string;
  /** `owner/name` from the path. */
  repo: string;
  sha: string;
  /** The Authorization header as sent, if any. */
  authorization: string | undefined;
  /** Lower-case names, as node:http gives them. */
  headers: IncomingHttpHeaders;
  /** The JSON body, or null when it was not JSON. */
  // biome-ignore lint/suspicious/noExplicitAny: tests read the body field by field
  body: any;
  /** What the fake answered: a status, `reset` for a dropped connection, `held` while held. */
  answered: number | 'reset' | 'held';
  /** Arrival order among all status posts, from 1. */
  seq: number;
}

export interface DownOptions {
  /** Extra headers on the outage's answer (e.g. `x-ratelimit-remaining: 0`). */
  headers?: Record<string, string>;
  /** Also fail the pipeline file reads, not only statuses. */
  files?: boolean;
}

/** The fake with the status API (`startFakeForge({ statuses: true })`). */
export interface FakeStatusForge {
  /** `http://127.0.0.1:<port>`: GitHub's API base and Gitea's forge_url. */
  url: string;
  /** The same fake as a file server: its reads, and an outage of the reads alone. */
  files: FakeForge;
  /** Every status post, in order of arrival. */
  statuses: StatusPost[];
  /** Serves `text` as `.conductor.yml` of `repo` at `sha`. */
  setFile(repo: string, sha: string, text: string, path?: string): void;
  /** Status posts for this commit, in order of arrival. */
  statusesFor(sha: string): StatusPost[];
  /** Status posts for this commit that the fake accepted (2xx), in order of arrival. */
  acceptedFor(sha: string): StatusPost[];
  /** Answers status posts with `outage` (500 unless given) until `up()`. */
  down(outage?: Outage, opts?: DownOptions): void;
  up(): void;
  /** Leaves status posts unanswered until `release()`; they are then answered as the fake then is. */
  hold(): void;
  release(): void;
  /** Polls until `count` status posts for `sha` have arrived (30 s at most); answers them. */
  waitForStatuses(sha: string, count: number): Promise<StatusPost[]>;
  close(): Promise<void>;
}

const GITHUB_FILE = /^\/repos\/([^/]+)\/([^/]+)\/contents\/(.+)$/;
const GITEA_RAW = /^\/api\/v1\/repos\/([^/]+)\/([^/]+)\/raw\/(.+)$/;
const GITEA_PERMISSION = /^\/api\/v1\/repos\/([^/]+)\/([^/]+)\/collaborators\/([^/]+)\/permission$/;
const GITHUB_STATUS = /^\/repos\/([^/]+)\/([^/]+)\/statuses\/([^/]+)$/;
const GITEA_STATUS = /^\/api\/v1\/repos\/([^/]+)\/([^/]+)\/statuses\/([^/]+)$/;
const STATES = {
  github: ['pending', 'success', 'failure', 'error'],
  gitea: ['pending', 'success', 'failure', 'error', 'warning'],
};

function json(
  res: ServerResponse,
  status: number,
  body: unknown,
  headers: Record<string, string> = {},
): number {
  const text = JSON.stringify(body);
  res.writeHead(status, {
    ...headers,
    'content-type': 'application/json; charset=utf-8',
    'content-length': String(Buffer.byteLength(text)),
  });
  res.end(text);
  return status;
}

function decode(s: string): string {
  try {
    return decodeURIComponent(s);
  } catch {
    return s;
  }
}

/** Starts a fake forge on a free loopback port; it is closed when the test file ends. */
export function startFakeForge(): Promise<FakeForge>;
export function startFakeForge(opts: { statuses: true }): Promise<FakeStatusForge>;
export async function startFakeForge(
  opts: { statuses?: boolean } = {},
): Promise<FakeForge | FakeStatusForge> {
  const files = new Map<string, string>();
  const key = (repo: string, sha: string, path: string) =>
    `${repo.toLowerCase()}@${sha.toLowerCase()}:${path}`;
  const requests: ForgeRequest[] = [];
  const permissions = new Map<string, string | number>();
  const who = (repo: string, login: string) => `${repo.toLowerCase()}:${login.toLowerCase()}`;
  // The file API's outage (FakeForge.down), and the status API's (FakeStatusForge.down).
  let outage: Outage | null = null;
  let statusOutage: { how: Outage; opts: DownOptions } | null = null;
  const statuses: StatusPost[] = [];
  let gate: { promise: Promise<void>; open: () => void } | null = null;
  let nextId = 1;

  function answerOutage(res: ServerResponse, how: Outage, headers?: Record<string, string>) {
    if (how === 'reset') {
      res.socket?.destroy();
      return 'reset' as const;
    }
    return json(res, how, { message: 'Server Error' }, headers);
  }

  function serveFiles(req: IncomingMessage, res: ServerResponse, url: URL) {
    const query = Object.fromEntries(url.searchParams);
    const github = GITHUB_FILE.exec(url.pathname);
    const gitea = GITEA_RAW.exec(url.pathname);
    const match = github ?? gitea;
    const record: ForgeRequest = {
      method: req.method ?? 'GET',
      path: decode(url.pathname),
      query,
      headers: req.headers,
      api: github ? 'github' : gitea ? 'gitea' : null,
      repo: match ? `${decode(match[1]!)}/${decode(match[2]!)}` : null,
      answered: 0,
    };
    requests.push(record);
    // Drain the request body (there should be none) before answering.
    req.resume();

    if (outage !== null) {
      record.answered = answerOutage(res, outage);
      return;
    }
    const asked = GITEA_PERMISSION.exec(url.pathname);
    if (req.method === 'GET' && asked) {
      const login = decode(asked[3]!);
      const answer = permissions.get(who(`${decode(asked[1]!)}/${decode(asked[2]!)}`, login));
      record.answered =
        answer === undefined
          ? json(res, 404, { message: 'user does not exist', url: `${url.origin}/api/swagger` })
          : typeof answer === 'number'
            ? json(res, answer, { message: 'token does not have the required permission' })
            : json(res, 200, { permission: answer, role_name: answer, user: { login } });
      return;
    }
    if (req.method !== 'GET' || !match || !record.repo) {
      record.answered = json(res, 404, { message: 'Not Found' });
      return;
    }
    const filePath = decode(match[3]!);
    const ref = query.ref;
    const text = ref === undefined ? undefined : files.get(key(record.repo, ref, filePath));

    if (github) {
      if (text === undefined) {
        record.answered = json(res, 404, {
          message: 'Not Found',
          documentation_url: 'https://docs.github.com/rest/repos/contents#get-repository-content',
          status: '404',
        });
        return;
      }
      const accept = String(req.headers.accept ?? '');
      if (/application\/vnd\.github(\.v3)?\.raw/.test(accept)) {
        const body = Buffer.from(text, 'utf8');
        res.writeHead(200, {
          'content-type': 'application/vnd.github.raw+json; charset=utf-8',
          'content-length': String(body.length),
        });
        res.end(body);
        record.answered = 200;
        return;
      }
      // The default media type: the file's metadata with its bytes in base64.
      const content = Buffer.from(text, 'utf8').toString('base64');
      record.answered = json(res, 200, {
        type: 'file',
        encoding: 'base64',
        size: Buffer.byteLength(text),
        name: filePath.split('/').pop(),
        path: filePath,
        content: content.replace(/(.{60})/g, '$1\n'),
        sha: '3d21ec53a331a6f037a91c368710b99387d012c1',
      });
      return;
    }
    if (text === undefined) {
      record.answered = json(res, 404, {
        errors: [`object does not exist [id: ${ref ?? ''}, rel_path: ${filePath}]`],
        message: 'The target couldn’t be found.',
        url: `${url.origin}/api/swagger`,
      });
      return;
    }
    const body = Buffer.from(text, 'utf8');
    res.writeHead(200, {
      'content-type': 'text/plain; charset=utf-8',
      'content-length': String(body.length),
    });
    res.end(body);
    record.answered = 200;
  }

  async function takeStatus(
    req: IncomingMessage,
    res: ServerResponse,
    api: 'github' | 'gitea',
    match: RegExpExecArray,
  ) {
    const chunks: Buffer[] = [];
    for await (const chunk of req) chunks.push(chunk as Buffer);
    let body: unknown = null;
    try {
      body = JSON.parse(Buffer.concat(chunks).toString('utf8'));
    } catch {
      body = null;
    }
    const record: StatusPost = {
      api,
      path: decode(new URL(req.url ?? '/', 'http://fake').pathname),
      repo: `${decode(match[1]!)}/${decode(match[2]!)}`,
      sha: decode(match[3]!),
      authorization: req.headers.authorization,
      headers: req.headers,
      body,
      answered: 'held',
      seq: statuses.length + 1,
    };
    statuses.push(record);
    if (gate) await gate.promise;

    if (statusOutage) {
      record.answered = answerOutage(res, statusOutage.how, statusOutage.opts.headers);
      return;
    }
    if (!record.authorization) {
      record.answered = json(res, 401, { message: 'Requires authentication' });
      return;
    }
    const b = body as Record<string, unknown> | null;
    if (
      !b ||
      typeof b.state !== 'string' ||
      !STATES[api].includes(b.state) ||
      (b.context !== undefined && typeof b.context !== 'string') ||
      (b.description !== undefined && typeof b.description !== 'string')
    ) {
      record.answered = json(res, 422, { message: 'Validation Failed' });
      return;
    }
    const now = new Date().toISOString();
    record.answered = json(res, 201, {
      id: nextId++,
      state: b.state,
      description: b.description ?? null,
      target_url: b.target_url ?? null,
      context: b.context ?? 'default',
      created_at: now,
      updated_at: now,
    });
  }

  // The repository admin API (issue #53).
  const repositories = new Map<string, { repo: string; private: boolean; admin: boolean }>();
  const hooks = new Map<number, FakeHook>();
  let nextHook = 1;
  const USER_REPOS = /^(\/api\/v1)?\/user\/repos$/;
  const REPO = /^(\/api\/v1)?\/repos\/([^/]+)\/([^/]+)$/;
  const HOOKS = /^(\/api\/v1)?\/repos\/([^/]+)\/([^/]+)\/hooks(?:\/([^/]+))?$/;
  const repoJson = (r: { repo: string; private: boolean; admin: boolean }) => ({
    full_name: r.repo,
    name: r.repo.split('/')[1],
    clone_url: `${fake.url}/${r.repo}.git`,
    private: r.private,
    permissions: { admin: r.admin, push: true, pull: true },
  });

  async function serveRepositories(
    req: IncomingMessage,
    res: ServerResponse,
    url: URL,
  ): Promise<boolean> {
    const list = USER_REPOS.exec(url.pathname);
    const one = REPO.exec(url.pathname);
    const hook = HOOKS.exec(url.pathname);
    if (!list && !one && !hook) return false;
    const chunks: Buffer[] = [];
    for await (const chunk of req) chunks.push(chunk as Buffer);
    const auth = String(req.headers.authorization ?? '').replace(/^(token|Bearer) /, '');
    if (auth !== fake.repositoryToken) {
      json(res, 401, { message: 'Bad credentials' });
      return true;
    }
    if (list && req.method === 'GET') {
      const gitea = list[1] !== undefined;
      const per = Number(url.searchParams.get(gitea ? 'limit' : 'per_page') ?? 30);
      const pageNo = Number(url.searchParams.get('page') ?? 1);
      const all = [...repositories.values()].sort((a, b) => a.repo.localeCompare(b.repo));
      json(res, 200, all.slice((pageNo - 1) * per, pageNo * per).map(repoJson));
      return true;
    }
    if (one && req.method === 'GET') {
      const r = repositories.get(`${decode(one[2]!)}/${decode(one[3]!)}`.toLowerCase());
      if (r) json(res, 200, repoJson(r));
      else json(res, 404, { message: 'Not Found' });
      return true;
    }
    const repo = hook
      ? repositories.get(`${decode(hook[2]!)}/${decode(hook[3]!)}`.toLowerCase())
      : undefined;
    if (!hook || !repo) {
      json(res, 404, { message: 'Not Found' });
      return true;
    }
    if (!repo.admin) {
      json(res, 403, { message: 'Must have admin rights to Repository.' });
      return true;
    }
    const api = hook[1] !== undefined ? 'gitea' : 'github';
    if (req.method === 'POST' && hook[4] === undefined && fake.refuseHooks !== null) {
      json(res, fake.refuseHooks, { message: 'webhook limit reached' });
      return true;
    }
    if (req.method === 'POST' && hook[4] === undefined) {
      // biome-ignore lint/suspicious/noExplicitAny: the hook's body, checked field by field
      let body: any = null;
      try {
        body = JSON.parse(Buffer.concat(chunks).toString('utf8'));
      } catch {
        body = null;
      }
      const config = body?.config ?? {};
      const events: unknown = body?.events;
      const typeOk = api === 'gitea' ? body?.type === 'gitea' : body?.name === 'web';
      if (
        !typeOk ||
        typeof config.url !== 'string' ||
        !/^https?:\/\//.test(config.url) ||
        config.content_type !== 'json' ||
        typeof config.secret !== 'string' ||
        config.secret.length < 16 ||
        !Array.isArray(events) ||
        !events.includes('push') ||
        !events.includes('pull_request')
      ) {
        json(res, 422, { message: 'Validation Failed' });
        return true;
      }
      const made: FakeHook = {
        id: nextHook++,
        api,
        repo: repo.repo,
        url: config.url,
        contentType: config.content_type,
        secret: config.secret,
        events: events as string[],
        authorization: req.headers.authorization,
      };
      hooks.set(made.id, made);
      json(res, 201, {
        id: made.id,
        type: body.type ?? 'web',
        active: true,
        config: { url: made.url },
      });
      return true;
    }
    if (req.method === 'DELETE' && hook[4] !== undefined) {
      const id = Number(hook[4]);
      const found = hooks.get(id);
      if (!found || found.repo !== repo.repo) {
        json(res, 404, { message: 'Not Found' });
        return true;
      }
      hooks.delete(id);
      res.writeHead(204);
      res.end();
      return true;
    }
    json(res, 405, { message: 'Method Not Allowed' });
    return true;
  }

  const server: Server = createServer((req, res) => {
    const url = new URL(req.url ?? '/', 'http://fake-forge');
    // Only once a test gave the repository API a token: other tests' reads of these paths
    // answer as they always did.
    if (
      fake.repositoryToken &&
      (USER_REPOS.test(url.pathname) || REPO.test(url.pathname) || HOOKS.test(url.pathname))
    ) {
      serveRepositories(req, res, url).catch(() => res.socket?.destroy());
      return;
    }
    if (opts.statuses) {
      const github = GITHUB_STATUS.exec(url.pathname);
      const gitea = GITEA_STATUS.exec(url.pathname);
      if (req.method === 'POST' && (github || gitea)) {
        takeStatus(req, res, gitea ? 'gitea' : 'github', (gitea ?? github)!).catch(() =>
          res.socket?.destroy(),
        );
        return;
      }
      if (statusOutage?.opts.files) {
        req.resume();
        answerOutage(res, statusOutage.how, statusOutage.opts.headers);
        return;
      }
    }
    serveFiles(req, res, url);
  });

  await new Promise<void>((done, fail) => {
    server.once('error', fail);
    server.listen(0, '127.0.0.1', () => done());
  });
  const { port } = server.address() as AddressInfo;
  let closed = false;
  const close = () => {
    if (closed) return Promise.resolve();
    closed = true;
    gate?.open();
    return new Promise<void>((done) => {
      server.closeAllConnections();
      server.close(() => done());
    });
  };
  const url = `http://127.0.0.1:${port}`;
  const fake: FakeForge = {
    url,
    requests,
    setFile(repo, sha, text, path = '.conductor.yml') {
      files.set(key(repo, sha, path), text);
    },
    setPermission(repo, login, answer) {
      permissions.set(who(repo, login), answer);
    },
    down(how = 500) {
      outage = how;
    },
    up() {
      outage = null;
    },
    requestsFor(sha) {
      return requests.filter((r) => r.query.ref?.toLowerCase() === sha.toLowerCase());
    },
    repositoryToken: '',
    addRepository(repo, o = {}) {
      repositories.set(repo.toLowerCase(), {
        repo,
        private: o.private ?? true,
        admin: o.admin ?? true,
      });
    },
    hooks,
    refuseHooks: null,
    close,
  };
  after(close);
  if (!opts.statuses) return fake;

  const withStatuses: FakeStatusForge = {
    url,
    files: fake,
    statuses,
    setFile: fake.setFile,
    statusesFor(sha) {
      return statuses.filter((s) => s.sha.toLowerCase() === sha.toLowerCase());
    },
    acceptedFor(sha) {
      return withStatuses
        .statusesFor(sha)
        .filter((s) => typeof s.answered === 'number' && s.answered < 300);
    },
    down(how = 500, downOpts = {}) {
      statusOutage = { how, opts: downOpts };
    },
    up() {
      statusOutage = null;
    },
    hold() {
      if (gate) return;
      let open = () => {};
      const promise = new Promise<void>((done) => {
        open = done;
      });
      gate = { promise, open };
    },
    release() {
      gate?.open();
      gate = null;
    },
    async waitForStatuses(sha, count) {
      // A deadline for a loaded machine, not a speed claim.
      const deadline = Date.now() + 30_000;
      for (;;) {
        const seen = withStatuses.statusesFor(sha);
        if (seen.length >= count) return seen;
        if (Date.now() > deadline) {
          throw new Error(
            `expected ${count} status posts for ${sha}, got ${seen.length}: ${JSON.stringify(
              seen.map((s) => s.body),
            )}`,
          );
        }
        await sleep(10);
      }
    },
    close,
  };
  return withStatuses;
}
