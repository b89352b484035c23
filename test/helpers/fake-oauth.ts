// A fake OAuth provider and permission API on loopback, shaped like GitHub
// (and Gitea, under /api/v1): the authorize page (which signs in whoever the
// test says, at once, or answers an error), the token endpoint (checking the
// client secret, the redirect URI and the PKCE verifier against the
// challenge), `/user`, and `/repos/{o}/{r}/collaborators/{login}/permission`
// (GitHub's route; Gitea's under /api/v1). Anything else is passed on to
// `fallback` (the fake forge's file and status API), so one URL can be
// GitHub's API base for the whole stack.
import { createHash, randomBytes } from 'node:crypto';
import { createServer, type IncomingMessage, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { after } from 'node:test';

export interface AuthorizeRequest {
  clientId: string | null;
  redirectUri: string | null;
  scope: string | null;
  state: string | null;
  codeChallenge: string | null;
  codeChallengeMethod: string | null;
}

export interface FakeOAuth {
  /** `http://127.0.0.1:<port>`: the OAuth base and GitHub's API base. */
  url: string;
  clientId: string;
  clientSecret: string;
  /** Who the authorize page signs in next (GitHub login). */
  signInAs: string;
  /** Set: the authorize page sends the person back with this `error` instead of a code. */
  authorizeError: string | null;
  /** Set: the token endpoint answers its errors with 200, as GitHub does (`{"error": ...}`). */
  errorsWith200: boolean;
  /** The token endpoint and `/user` do not answer at all while set (a forge that hangs). */
  hang: boolean;
  /** The permission API does not answer while set. */
  hangPermissions: boolean;
  /** Every authorize request, in order. */
  authorizations: AuthorizeRequest[];
  /** Every token exchange's form fields, in order. */
  tokenRequests: Record<string, string>[];
  /** Every permission question: repo, login and the Authorization header. */
  permissionRequests: { repo: string; login: string; authorization: string | undefined }[];
  /** What the permission API answers for a login on a repo (`read`, `write`, `admin`, `none`); unset: 404. */
  setPermission(repo: string, login: string, permission: string | null): void;
  /** Where anything else goes (the fake forge's URL). */
  fallback: string | null;
}

const sha256url = (text: string) => createHash('sha256').update(text).digest('base64url');

function json(res: ServerResponse, status: number, body: unknown): void {
  res.writeHead(status, { 'content-type': 'application/json; charset=utf-8' });
  res.end(JSON.stringify(body));
}

async function readBody(req: IncomingMessage): Promise<Buffer> {
  const chunks: Buffer[] = [];
  for await (const chunk of req) chunks.push(chunk as Buffer);
  return Buffer.concat(chunks);
}

const PERMISSION = /^(?:\/api\/v1)?\/repos\/([^/]+)\/([^/]+)\/collaborators\/([^/]+)\/permission$/;

/** Starts the fake provider on a free loopback port; closed when the test file ends. */
export async function startFakeOAuth(): Promise<FakeOAuth> {
  const codes = new Map<string, { login: string; challenge: string; redirectUri: string }>();
  const tokens = new Map<string, string>();
  const permissions = new Map<string, string>();
  const held: ServerResponse[] = [];
  const key = (repo: string, login: string) => `${repo.toLowerCase()}:${login.toLowerCase()}`;

  const fake: FakeOAuth = {
    url: '',
    clientId: 'fake-client-id',
    clientSecret: `fake-secret-${randomBytes(6).toString('hex')}`,
    signInAs: 'alice',
    authorizeError: null,
    errorsWith200: false,
    hang: false,
    hangPermissions: false,
    authorizations: [],
    tokenRequests: [],
    permissionRequests: [],
    setPermission(repo, login, permission) {
      if (permission === null) permissions.delete(key(repo, login));
      else permissions.set(key(repo, login), permission);
    },
    fallback: null,
  };

  async function handle(req: IncomingMessage, res: ServerResponse): Promise<void> {
    const url = new URL(req.url ?? '/', 'http://fake');
    const path = url.pathname;
    if (req.method === 'GET' && path === '/login/oauth/authorize') {
      const q = url.searchParams;
      fake.authorizations.push({
        clientId: q.get('client_id'),
        redirectUri: q.get('redirect_uri'),
        scope: q.get('scope'),
        state: q.get('state'),
        codeChallenge: q.get('code_challenge'),
        codeChallengeMethod: q.get('code_challenge_method'),
      });
      const back = new URL(q.get('redirect_uri') ?? 'http://invalid/');
      if (q.get('state') !== null) back.searchParams.set('state', q.get('state')!);
      if (fake.authorizeError) {
        back.searchParams.set('error', fake.authorizeError);
        back.searchParams.set('error_description', 'The user has denied your application access.');
      } else if (q.get('client_id') !== fake.clientId) {
        back.searchParams.set('error', 'unknown_client');
      } else {
        const code = randomBytes(10).toString('hex');
        codes.set(code, {
          login: fake.signInAs,
          challenge: q.get('code_challenge') ?? '',
          redirectUri: q.get('redirect_uri') ?? '',
        });
        back.searchParams.set('code', code);
      }
      res.writeHead(302, { location: back.href });
      res.end();
      return;
    }
    if (req.method === 'POST' && path === '/login/oauth/access_token') {
      const form = Object.fromEntries(new URLSearchParams((await readBody(req)).toString()));
      fake.tokenRequests.push(form);
      if (fake.hang) {
        held.push(res);
        return;
      }
      const grant = codes.get(form.code ?? '');
      codes.delete(form.code ?? '');
      const error = (status: number, body: Record<string, string>) =>
        json(res, fake.errorsWith200 ? 200 : status, body);
      if (form.client_id !== fake.clientId || form.client_secret !== fake.clientSecret) {
        error(401, { error: 'invalid_client' });
      } else if (!grant || grant.redirectUri !== form.redirect_uri) {
        error(400, {
          error: 'bad_verification_code',
          error_description: 'The code passed is incorrect or expired.',
        });
      } else if (sha256url(form.code_verifier ?? '') !== grant.challenge) {
        error(400, { error: 'invalid_grant', error_description: 'PKCE verification failed' });
      } else {
        const token = `gho_${randomBytes(12).toString('hex')}`;
        tokens.set(token, grant.login);
        json(res, 200, { access_token: token, token_type: 'bearer', scope: '' });
      }
      return;
    }
    if (req.method === 'GET' && (path === '/user' || path === '/api/v1/user')) {
      if (fake.hang) {
        held.push(res);
        return;
      }
      const auth = String(req.headers.authorization ?? '').replace(/^(Bearer|token) /, '');
      const login = tokens.get(auth);
      if (!login) json(res, 401, { message: 'Bad credentials' });
      else json(res, 200, { login, id: 1000 + login.length });
      return;
    }
    const asked = PERMISSION.exec(path);
    if (req.method === 'GET' && asked) {
      const repo = `${decodeURIComponent(asked[1]!)}/${decodeURIComponent(asked[2]!)}`;
      const login = decodeURIComponent(asked[3]!);
      fake.permissionRequests.push({ repo, login, authorization: req.headers.authorization });
      if (fake.hangPermissions) {
        held.push(res);
        return;
      }
      const permission = permissions.get(key(repo, login));
      if (permission === undefined) json(res, 404, { message: 'Not Found' });
      else json(res, 200, { permission, role_name: permission, user: { login } });
      return;
    }
    if (!fake.fallback) {
      json(res, 404, { message: 'Not Found' });
      return;
    }
    // Everything else is the fake forge's (files, statuses).
    const body = await readBody(req);
    const headers: Record<string, string> = {};
    for (const [name, value] of Object.entries(req.headers)) {
      if (value !== undefined && name !== 'host' && name !== 'connection') {
        headers[name] = Array.isArray(value) ? value.join(', ') : value;
      }
    }
    const answer = await fetch(`${fake.fallback}${req.url}`, {
      method: req.method ?? 'GET',
      headers,
      ...(body.length ? { body } : {}),
      redirect: 'manual',
    });
    const out = Buffer.from(await answer.arrayBuffer());
    const outHeaders: Record<string, string> = {};
    answer.headers.forEach((value, name) => {
      if (name !== 'content-encoding' && name !== 'transfer-encoding' && name !== 'connection') {
        outHeaders[name] = value;
      }
    });
    outHeaders['content-length'] = String(out.length);
    res.writeHead(answer.status, outHeaders);
    res.end(out);
  }

  const server = createServer((req, res) => {
    handle(req, res).catch((err) => {
      if (!res.headersSent) json(res, 500, { message: String(err) });
      else res.destroy();
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  fake.url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  after(async () => {
    for (const res of held) res.destroy();
    server.closeAllConnections();
    await new Promise<void>((resolve) => server.close(() => resolve()));
  });
  return fake;
}
