// A fake GitHub for a GitHub App, on loopback, checking what GitHub checks:
//
//   POST  /app/installations/{id}/access_tokens   the app's JWT (RS256) verified with the
//         app's PUBLIC key, its iss (the app id), iat and exp (at most 10 minutes, not
//         expired); answers {token, expires_at} with an expiry the test chooses; 404 for an
//         installation it does not have
//   GET   /repos/{o}/{r}                          the repository, as GitHub answers an installation
//         token: full_name, clone_url, private, and no `permissions` (a user token's field)
//   GET   /repos/{o}/{r}/contents/{path}?ref=     the pipeline file
//   POST  /repos/{o}/{r}/check-runs               name, head_sha, status (and conclusion when
//         completed) required, as GitHub's 422 says; 201 {id, ...}
//   PATCH /repos/{o}/{r}/check-runs/{id}          404 for a run it never made on that repo
//   GET   /repos/{o}/{r}/collaborators/{login}/permission
//   POST  /repos/{o}/{r}/statuses/{sha}           (recorded: an app project should post none)
//
// Every call but the token exchange needs `Authorization: Bearer <installation token>`: one
// the fake issued, not expired, of an installation that has the repository (401 otherwise, as
// GitHub answers a bad or expired token; 404 for a repository the installation lacks).
import {
  createPublicKey,
  generateKeyPairSync,
  type KeyObject,
  randomBytes,
  verify,
} from 'node:crypto';
import { rmSync, writeFileSync } from 'node:fs';
import { createServer, type IncomingMessage, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after } from 'node:test';

export interface AppCall {
  method: string;
  path: string;
  /** The installation whose token authorised it (null for the token exchange and refusals). */
  installation: number | null;
  authorization: string | undefined;
  // biome-ignore lint/suspicious/noExplicitAny: tests read the body field by field
  body: any;
  answered: number;
}

export interface CheckRun {
  id: number;
  repo: string;
  // biome-ignore lint/suspicious/noExplicitAny: tests read the fields GitHub keeps
  fields: Record<string, any>;
  /** Every body it was created or updated with, in order. */
  // biome-ignore lint/suspicious/noExplicitAny: as above
  history: Record<string, any>[];
}

export interface FakeGitHubApp {
  url: string;
  appId: string;
  /** The PEM private key's path, for CONDUCTOR_GITHUB_APP_PRIVATE_KEY_FILE. */
  keyFile: string;
  webhookSecret: string;
  calls: AppCall[];
  /** Tokens minted, in order, with their installation. */
  mints: { installation: number; token: string; expiresAt: Date }[];
  checkRuns: Map<number, CheckRun>;
  /** Lets `installation` serve these repositories (and mint tokens). */
  install(installation: number, repos: string[]): void;
  uninstall(installation: number): void;
  setFile(repo: string, sha: string, text: string): void;
  setPermission(repo: string, login: string, permission: string): void;
  /** Makes GET /repos/{o}/{r} say the repository is public (it says private otherwise). */
  setPublic(repo: string): void;
  /** How long the next tokens live (default an hour). */
  tokenTtlMs: number;
  /** The check runs of a commit, in order of creation. */
  runsFor(sha: string): CheckRun[];
  close(): Promise<void>;
}

const b64json = (part: string) => JSON.parse(Buffer.from(part, 'base64url').toString('utf8'));

/** Checks an app JWT as GitHub does; answers why it is refused, or null. */
function jwtRefusal(jwt: string, publicKey: KeyObject, appId: string): string | null {
  const parts = jwt.split('.');
  if (parts.length !== 3) return 'not a JWT';
  const [header, claims, signature] = parts as [string, string, string];
  let h: { alg?: string };
  let c: { iat?: number; exp?: number; iss?: unknown };
  try {
    h = b64json(header);
    c = b64json(claims);
  } catch {
    return 'undecodable';
  }
  if (h.alg !== 'RS256') return `alg ${h.alg}`;
  const ok = verify(
    'sha256',
    Buffer.from(`${header}.${claims}`),
    publicKey,
    Buffer.from(signature, 'base64url'),
  );
  if (!ok) return 'bad signature';
  const now = Math.floor(Date.now() / 1000);
  if (String(c.iss) !== appId) return `iss ${String(c.iss)}`;
  if (typeof c.iat !== 'number' || c.iat > now + 60)
    return "'Issued at' claim (iat) is in the future";
  if (typeof c.exp !== 'number' || c.exp <= now) return 'expired';
  if (c.exp - c.iat > 600 + 60) return "'Expiration time' claim (exp) is too far in the future";
  return null;
}

/** Starts the fake; stopped when the test file ends. */
export async function startFakeGitHubApp(): Promise<FakeGitHubApp> {
  const { privateKey, publicKey } = generateKeyPairSync('rsa', { modulusLength: 2048 });
  const keyFile = join(tmpdir(), `conductor-app-${randomBytes(6).toString('hex')}.pem`);
  // GitHub hands out PKCS#1 PEM ("BEGIN RSA PRIVATE KEY").
  writeFileSync(keyFile, privateKey.export({ type: 'pkcs1', format: 'pem' }), { mode: 0o600 });
  const pub = createPublicKey(publicKey.export({ type: 'spki', format: 'pem' }));
  const appId = '424242';
  const installations = new Map<number, Set<string>>();
  const tokens = new Map<string, { installation: number; expiresAt: number }>();
  const files = new Map<string, string>();
  const permissions = new Map<string, string>();
  const publicRepos = new Set<string>();
  let nextRun = 7_000_001;

  const fake: FakeGitHubApp = {
    url: '',
    appId,
    keyFile,
    webhookSecret: `app-secret-${randomBytes(8).toString('hex')}`,
    calls: [],
    mints: [],
    checkRuns: new Map(),
    tokenTtlMs: 3_600_000,
    install: (id, repos) => installations.set(id, new Set(repos.map((r) => r.toLowerCase()))),
    uninstall: (id) => installations.delete(id),
    setFile: (repo, sha, text) => files.set(`${repo.toLowerCase()}@${sha}`, text),
    setPermission: (repo, login, p) => permissions.set(`${repo.toLowerCase()} ${login}`, p),
    setPublic: (repo) => publicRepos.add(repo.toLowerCase()),
    runsFor: (sha) => [...fake.checkRuns.values()].filter((r) => r.fields.head_sha === sha),
    close: () =>
      new Promise((done) =>
        server.close(() => {
          rmSync(keyFile, { force: true });
          done();
        }),
      ),
  };

  const server = createServer((req: IncomingMessage, res: ServerResponse) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      const url = new URL(req.url ?? '/', 'http://fake');
      const path = decodeURIComponent(url.pathname);
      let body: unknown = null;
      try {
        body = chunks.length ? JSON.parse(Buffer.concat(chunks).toString('utf8')) : null;
      } catch {
        body = null;
      }
      const call: AppCall = {
        method: req.method ?? 'GET',
        path,
        installation: null,
        authorization: req.headers.authorization,
        body,
        answered: 0,
      };
      fake.calls.push(call);
      const answer = (status: number, json: unknown) => {
        call.answered = status;
        res.writeHead(status, { 'content-type': 'application/json' });
        res.end(JSON.stringify(json));
      };
      const bearer = /^Bearer (.+)$/.exec(req.headers.authorization ?? '')?.[1];

      const exchange = /^\/app\/installations\/(\d+)\/access_tokens$/.exec(path);
      if (exchange && req.method === 'POST') {
        const refusal = bearer ? jwtRefusal(bearer, pub, appId) : 'no JWT';
        if (refusal)
          return answer(401, { message: `A JSON web token could not be decoded (${refusal})` });
        const id = Number(exchange[1]);
        if (!installations.has(id)) return answer(404, { message: 'Not Found' });
        const token = `ghs_${randomBytes(18).toString('hex')}`;
        const expiresAt = new Date(Date.now() + fake.tokenTtlMs);
        tokens.set(token, { installation: id, expiresAt: expiresAt.getTime() });
        fake.mints.push({ installation: id, token, expiresAt });
        return answer(201, {
          token,
          expires_at: expiresAt.toISOString().replace(/\.\d{3}Z$/, 'Z'),
          permissions: { checks: 'write', contents: 'read', metadata: 'read' },
          repository_selection: 'selected',
        });
      }

      const held = bearer ? tokens.get(bearer) : undefined;
      if (!held || held.expiresAt <= Date.now()) {
        return answer(401, { message: 'Bad credentials' });
      }
      call.installation = held.installation;
      const repoMatch = /^\/repos\/([^/]+\/[^/]+)(\/.*)?$/.exec(path);
      if (!repoMatch) return answer(404, { message: 'Not Found' });
      const repo = repoMatch[1]!;
      const rest = repoMatch[2] ?? '';
      if (!installations.get(held.installation)?.has(repo.toLowerCase())) {
        return answer(404, { message: 'Not Found' });
      }
      const b = body as Record<string, unknown> | null;
      if (req.method === 'GET' && rest === '') {
        const isPublic = publicRepos.has(repo.toLowerCase());
        return answer(200, {
          full_name: repo,
          clone_url: `https://github.com/${repo}.git`,
          private: !isPublic,
          visibility: isPublic ? 'public' : 'private',
          default_branch: 'main',
        });
      }
      if (req.method === 'GET' && rest.startsWith('/contents/')) {
        const text = files.get(`${repo.toLowerCase()}@${url.searchParams.get('ref')}`);
        if (text === undefined) return answer(404, { message: 'Not Found' });
        call.answered = 200;
        res.writeHead(200, { 'content-type': 'application/vnd.github.raw+json' });
        res.end(text);
        return;
      }
      if (req.method === 'POST' && rest === '/check-runs') {
        if (!b || typeof b.name !== 'string' || typeof b.head_sha !== 'string') {
          return answer(422, { message: 'Invalid request: name and head_sha are required' });
        }
        if (b.status === 'completed' && typeof b.conclusion !== 'string') {
          return answer(422, { message: 'conclusion is required when status is completed' });
        }
        const id = nextRun++;
        fake.checkRuns.set(id, { id, repo, fields: { ...b }, history: [{ ...b }] });
        return answer(201, { id, ...b, html_url: `https://github.com/${repo}/runs/${id}` });
      }
      const patch = /^\/check-runs\/(\d+)$/.exec(rest);
      if (req.method === 'PATCH' && patch) {
        const run = fake.checkRuns.get(Number(patch[1]));
        if (!run || run.repo !== repo) return answer(404, { message: 'Not Found' });
        if (b?.status === 'completed' && typeof b.conclusion !== 'string') {
          return answer(422, { message: 'conclusion is required when status is completed' });
        }
        Object.assign(run.fields, b);
        run.history.push({ ...b });
        return answer(200, { id: run.id, ...run.fields });
      }
      const perm = /^\/collaborators\/([^/]+)\/permission$/.exec(rest);
      if (req.method === 'GET' && perm) {
        const p = permissions.get(`${repo.toLowerCase()} ${perm[1]}`);
        if (!p) return answer(404, { message: 'Not Found' });
        return answer(200, { permission: p, user: { login: perm[1] } });
      }
      if (req.method === 'POST' && /^\/statuses\/[0-9a-f]{40}$/.test(rest)) {
        return answer(201, { state: b?.state });
      }
      return answer(404, { message: 'Not Found' });
    });
  });
  await new Promise<void>((done) => server.listen(0, '127.0.0.1', () => done()));
  fake.url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  after(() => fake.close());
  return fake;
}
