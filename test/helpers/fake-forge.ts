// A fake forge for end-to-end tests: a real HTTP server on loopback that serves
// `.conductor.yml` per commit the way GitHub's contents API and Gitea's raw file
// API do, records every request for assertions, and can be told to fail.
//
//   GitHub  GET /repos/{owner}/{repo}/contents/{path}?ref={sha}
//           raw bytes for `Accept: application/vnd.github.raw(+json)`, else the
//           JSON object with the content in base64, as GitHub answers it
//   Gitea   GET /api/v1/repos/{owner}/{repo}/raw/{path}?ref={sha}
//           GET /api/v1/repos/{owner}/{repo}/collaborators/{login}/permission
//
// A commit it was not given a file for answers 404 with the forge's own error body, and so
// does a login it was not given a permission for.
import {
  createServer,
  type IncomingHttpHeaders,
  type Server,
  type ServerResponse,
} from 'node:http';
import type { AddressInfo } from 'node:net';
import { after } from 'node:test';

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
  /** Every request, in order of arrival. */
  requests: ForgeRequest[];
  /** Serves `text` as `path` (default `.conductor.yml`) of `repo` at commit `sha`. */
  setFile(repo: string, sha: string, text: string, path?: string): void;
  /**
   * Answers Gitea's permission API for `login` on `repo`: a permission (`read`, `write`,
   * `admin`, `owner`, `none`) as 200, or a bare HTTP status (403, say).
   */
  setPermission(repo: string, login: string, answer: string | number): void;
  /** Makes every request answer `outage` (500 unless given) until `up()`. */
  down(outage?: Outage): void;
  up(): void;
  /** The requests that asked for anything at this commit (`ref=<sha>`). */
  requestsFor(sha: string): ForgeRequest[];
  close(): Promise<void>;
}

const GITHUB_FILE = /^\/repos\/([^/]+)\/([^/]+)\/contents\/(.+)$/;
const GITEA_RAW = /^\/api\/v1\/repos\/([^/]+)\/([^/]+)\/raw\/(.+)$/;
const GITEA_PERMISSION = /^\/api\/v1\/repos\/([^/]+)\/([^/]+)\/collaborators\/([^/]+)\/permission$/;

function json(res: ServerResponse, status: number, body: unknown): number {
  const text = JSON.stringify(body);
  res.writeHead(status, {
    'content-type': 'application/json; charset=utf-8',
    'content-length': String(Buffer.byteLength(text)),
  });
  res.end(text);
  return status;
}

/** Starts a fake forge on a free loopback port; it is closed when the test file ends. */
export async function startFakeForge(): Promise<FakeForge> {
  const files = new Map<string, string>();
  const key = (repo: string, sha: string, path: string) =>
    `${repo.toLowerCase()}@${sha.toLowerCase()}:${path}`;
  const requests: ForgeRequest[] = [];
  const permissions = new Map<string, string | number>();
  const who = (repo: string, login: string) => `${repo.toLowerCase()}:${login.toLowerCase()}`;
  let outage: Outage | null = null;

  const server: Server = createServer((req, res) => {
    const url = new URL(req.url ?? '/', 'http://fake-forge');
    let path: string;
    try {
      path = decodeURIComponent(url.pathname);
    } catch {
      path = url.pathname;
    }
    const query = Object.fromEntries(url.searchParams);
    const github = GITHUB_FILE.exec(url.pathname);
    const gitea = GITEA_RAW.exec(url.pathname);
    const match = github ?? gitea;
    const record: ForgeRequest = {
      method: req.method ?? 'GET',
      path,
      query,
      headers: req.headers,
      api: github ? 'github' : gitea ? 'gitea' : null,
      repo: match ? `${decodeURIComponent(match[1]!)}/${decodeURIComponent(match[2]!)}` : null,
      answered: 0,
    };
    requests.push(record);
    // Drain the request body (there should be none) before answering.
    req.resume();

    if (outage === 'reset') {
      record.answered = 'reset';
      req.socket.destroy();
      return;
    }
    if (outage !== null) {
      record.answered = json(res, outage, { message: 'Server Error' });
      return;
    }
    const asked = GITEA_PERMISSION.exec(url.pathname);
    if (req.method === 'GET' && asked) {
      const login = decodeURIComponent(asked[3]!);
      const repo = `${decodeURIComponent(asked[1]!)}/${decodeURIComponent(asked[2]!)}`;
      const answer = permissions.get(who(repo, login));
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
    const filePath = decodeURIComponent(match[3]!);
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
  });

  await new Promise<void>((done, fail) => {
    server.once('error', fail);
    server.listen(0, '127.0.0.1', () => done());
  });
  const { port } = server.address() as AddressInfo;
  let closed = false;
  const fake: FakeForge = {
    url: `http://127.0.0.1:${port}`,
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
    close() {
      if (closed) return Promise.resolve();
      closed = true;
      return new Promise<void>((done) => {
        server.closeAllConnections();
        server.close(() => done());
      });
    },
  };
  after(() => fake.close());
  return fake;
}
