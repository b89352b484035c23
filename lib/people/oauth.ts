// Sign-in with a forge's OAuth (GitHub's OAuth app flow, Gitea's and
// Forgejo's OAuth2), through oauth4webapi: authorization code with PKCE
// (S256) and a `state`. Starting a sign-in writes nothing: the state, the
// PKCE verifier and where to go afterwards travel in the browser's cookie
// under an HMAC (lib/pages/access.ts), so an anonymous visitor does not wake
// a paused database. At the callback, once that cookie has verified, the
// state is used up (its hash recorded in `oauth_states`, once), and the
// provider's code is good once too. Only identity is asked for (GitHub: no
// scope at all, the public profile; Gitea: read:user); what a person may do
// is asked of the forge with the project's own token at each action
// (lib/app/people.ts).
//
// Every call to the provider goes through the forge client
// (lib/forge/client.ts): its address policy, no redirects, and a timeout.
import { createHash } from 'node:crypto';
import * as oauth from 'oauth4webapi';
import { type Pool, transaction } from '../db/index.ts';
import { AppError } from '../errors.ts';
import { callForge, ForgeRefusedError, ForgeTransportError } from '../forge/client.ts';
import type { ForgeKind } from '../forge/forge.ts';
import { forgeName, forgeOf } from '../forge/registry.ts';
import { peopleNow } from './clock.ts';

/** How long a sign-in may take at the forge before its state is refused. */
export const STATE_TTL_S = 10 * 60;
/** The cookie that binds a sign-in's state to the browser that started it. */
export const STATE_COOKIE = 'conductor_oauth';

/** One forge's OAuth settings (lib/config.ts: CONDUCTOR_GITHUB_*, CONDUCTOR_GITEA_*, CONDUCTOR_GITLAB_*). */
export interface OAuthForge {
  forge: ForgeKind;
  /** Where the authorize and token endpoints are (Forge.oauth names their paths). */
  oauthUrl: string;
  /** The API base (`/user` is read there). */
  apiUrl: string;
  clientId: string;
  clientSecret: string;
  timeoutMs: number;
}

/** A sign-in that went wrong, with the page's status and the words for the person. */
export class SignInError extends AppError {
  constructor(status: number, message: string, options?: ErrorOptions) {
    super(status, status === 503 ? 'unavailable' : 'bad_request', message, options);
  }
  // The message is written for the person signing in and says nothing secret.
  override get expose(): boolean {
    return true;
  }
}

const hash = (state: string) => createHash('sha256').update(state, 'utf8').digest();
const trim = (url: string) => url.replace(/\/+$/, '');

function server(f: OAuthForge): oauth.AuthorizationServer {
  const base = trim(f.oauthUrl);
  const { oauth: endpoints } = forgeOf(f.forge);
  return {
    issuer: base,
    authorization_endpoint: endpoints.authorizeUrl(base),
    token_endpoint: endpoints.tokenUrl(base),
  };
}

/**
 * Starts a sign-in, touching no database: a new state and PKCE verifier, and
 * the provider's authorize URL. The caller keeps state and verifier in the
 * browser's sealed cookie.
 */
export async function startSignIn(
  f: OAuthForge,
  redirectUri: string,
): Promise<{ url: string; state: string; verifier: string; startedMs: number }> {
  const state = oauth.generateRandomState();
  const verifier = oauth.generateRandomCodeVerifier();
  const challenge = await oauth.calculatePKCECodeChallenge(verifier);
  const url = new URL(server(f).authorization_endpoint!);
  url.searchParams.set('client_id', f.clientId);
  url.searchParams.set('redirect_uri', redirectUri);
  url.searchParams.set('response_type', 'code');
  // Identity scopes only (Forge.oauth.scope): GitHub's public profile needs none.
  const scope = forgeOf(f.forge).oauth.scope;
  if (scope) url.searchParams.set('scope', scope);
  url.searchParams.set('state', state);
  url.searchParams.set('code_challenge', challenge);
  url.searchParams.set('code_challenge_method', 'S256');
  return { url: url.href, state, verifier, startedMs: peopleNow() };
}

/** What the browser's sealed cookie said of its sign-in (null: no cookie, or not one of ours). */
export interface KeptSignIn {
  forge: string;
  state: string;
  verifier: string;
  next: string;
  startedMs: number;
}

/** The fetch oauth4webapi uses: the forge client's, with its address policy and timeout. */
function forgeFetch(timeoutMs: number) {
  return async (
    url: string,
    init: oauth.CustomFetchOptions<string, unknown>,
  ): Promise<Response> => {
    const body =
      init.body === undefined || init.body === null
        ? undefined
        : init.body instanceof URLSearchParams
          ? init.body.toString()
          : String(init.body);
    const answer = await callForge({
      method: init.method === 'POST' ? 'POST' : 'GET',
      url,
      headers: init.headers,
      ...(body === undefined ? {} : { body }),
      timeoutMs,
    });
    return new Response(answer.body ? new Uint8Array(answer.body) : null, {
      status: answer.status,
      headers: answer.headers,
    });
  };
}

function unavailable(f: OAuthForge, cause: unknown): SignInError {
  return new SignInError(503, `${forgeName(f.forge)} did not answer; try again.`, { cause });
}

/** What a provider's refusal says, in its own words when it gave any. */
function providerWords(err: unknown): string {
  const body =
    err instanceof oauth.ResponseBodyError
      ? err.cause
      : ((err as { cause?: { body?: Record<string, unknown> } })?.cause?.body ?? null);
  if (body && typeof body.error === 'string') {
    const desc = typeof body.error_description === 'string' ? `: ${body.error_description}` : '';
    return `${body.error}${desc}`;
  }
  return err instanceof Error ? err.message : String(err);
}

/**
 * Finishes a sign-in where the provider sent the person back: the state must
 * be the one of the browser's sealed cookie (`kept`, verified by the caller
 * before anything else), for this forge, not older than ten minutes, and
 * unused: it is used up here, in the database, whatever happens next. Then
 * the code is exchanged with the PKCE verifier and the person's login read.
 * Anything wrong is a SignInError with words for the person; no session is
 * made by this function.
 */
export async function finishSignIn(
  pool: Pool,
  f: OAuthForge,
  redirectUri: string,
  callback: URL,
  kept: KeptSignIn | null,
): Promise<{ login: string; next: string }> {
  const name = forgeName(f.forge);
  const state = callback.searchParams.get('state');
  if (!state || !kept || kept.forge !== f.forge || state !== kept.state) {
    throw new SignInError(
      400,
      'This sign-in did not start in this browser, or its state was changed on the way: nobody was signed in. Start again from the sign-in page.',
    );
  }
  const tooLate = () =>
    new SignInError(
      400,
      'This sign-in was already used, or took longer than ten minutes: nobody was signed in. Start again from the sign-in page.',
    );
  const nowMs = peopleNow();
  if (nowMs - kept.startedMs > STATE_TTL_S * 1000 || kept.startedMs > nowMs + 60_000) {
    throw tooLate();
  }
  // Used up here, once: of two callbacks with the same state, the one whose
  // insert comes second finds the row there (after a retry on 40001 under
  // REPEATABLE READ) and signs nobody in.
  const fresh = await transaction(pool, async (tx) => {
    const { rows } = await tx.query(
      `insert into oauth_states (state_hash, forge, created_at)
       values ($1, $2, to_timestamp($3))
       on conflict (state_hash) do nothing
       returning 1`,
      [hash(state), f.forge, kept.startedMs / 1000],
    );
    // Used states older than the time a state lasts are of no more use: a few at a time.
    await tx.query(
      `delete from oauth_states where state_hash in (
         select state_hash from oauth_states where created_at < to_timestamp($1) limit 100)`,
      [nowMs / 1000 - STATE_TTL_S - 60],
    );
    return rows.length === 1;
  });
  if (!fresh) throw tooLate();
  const as = server(f);
  const client: oauth.Client = { client_id: f.clientId };
  let params: URLSearchParams;
  try {
    params = oauth.validateAuthResponse(as, client, callback, state);
  } catch (err) {
    throw new SignInError(
      400,
      `${name} did not sign you in (${providerWords(err instanceof oauth.AuthorizationResponseError ? { cause: { body: Object.fromEntries(err.cause) } } : err)}): nobody was signed in.`,
      { cause: err },
    );
  }
  if (!params.get('code')) {
    throw new SignInError(400, `${name} sent no code back: nobody was signed in. Start again.`);
  }
  const options = {
    [oauth.customFetch]: forgeFetch(f.timeoutMs),
    // Plain http only where the forge client allows private addresses (the tests' fake provider).
    [oauth.allowInsecureRequests]: as.token_endpoint!.startsWith('http:'),
  };
  let accessToken: string;
  try {
    const response = await oauth.authorizationCodeGrantRequest(
      as,
      client,
      oauth.ClientSecretPost(f.clientSecret),
      params,
      redirectUri,
      kept.verifier,
      options,
    );
    accessToken = (await oauth.processAuthorizationCodeResponse(as, client, response)).access_token;
  } catch (err) {
    if (err instanceof ForgeTransportError) throw unavailable(f, err);
    if (err instanceof ForgeRefusedError) {
      throw new SignInError(400, `${name} could not be asked: ${err.message}`, { cause: err });
    }
    throw new SignInError(
      400,
      `${name} refused the sign-in (${providerWords(err)}): nobody was signed in.`,
      { cause: err },
    );
  }
  return { login: await readLogin(f, accessToken), next: kept.next };
}

/** The login of the person whose token this is (`/user` under the forge's API: GitHub's, Gitea's, GitLab's). */
async function readLogin(f: OAuthForge, token: string): Promise<string> {
  const name = forgeName(f.forge);
  let answer: Awaited<ReturnType<typeof callForge>>;
  try {
    answer = await callForge({
      url: `${trim(f.apiUrl)}/user`,
      headers: forgeOf(f.forge).headers(token),
      timeoutMs: f.timeoutMs,
    });
  } catch (err) {
    if (err instanceof ForgeTransportError) throw unavailable(f, err);
    throw new SignInError(400, `${name} could not be asked who you are: ${(err as Error).message}`);
  }
  if (answer.kind === 'retryable' || answer.kind === 'rate_limited') throw unavailable(f, null);
  let login: unknown;
  try {
    login = forgeOf(f.forge).oauth.login(JSON.parse(answer.body?.toString('utf8') ?? ''));
  } catch {
    login = undefined;
  }
  if (
    answer.status !== 200 ||
    typeof login !== 'string' ||
    !/^[A-Za-z0-9._-]{1,100}$/.test(login)
  ) {
    throw new SignInError(
      400,
      `${name} did not say who you are (HTTP ${answer.status}): nobody was signed in.`,
    );
  }
  return login;
}
