// Sign-in with a forge, the pages' side: the cookie that binds a sign-in's
// state to the browser, and the page that follows a sign-in.
import { forgeName } from '../people/index.ts';
import { STATE_COOKIE, STATE_TTL_S } from '../people/oauth.ts';
import type { Forge as ForgeKind } from '../states.ts';
import { html, page } from './html.ts';

/**
 * The Set-Cookie of a sign-in's state (or, with `state` null, its removal).
 * SameSite=Lax, not Strict: the forge sends the browser back from its own
 * site, and a Strict cookie would not come along. Only the callback's path.
 */
export function signInCookie(state: string | null, forge: string, secure: boolean): string {
  const flag = secure ? '; Secure' : '';
  const life = state === null ? '; Max-Age=0' : `; Max-Age=${STATE_TTL_S}`;
  return `${STATE_COOKIE}=${state ?? ''}; Path=/login/${forge}/callback; HttpOnly; SameSite=Lax${flag}${life}`;
}

/**
 * The page a sign-in lands on: it moves on to `next` itself. A redirect
 * straight from the callback would still count as the forge's navigation,
 * and the browser would hold back the new SameSite=Strict session cookie on
 * it; a navigation this page starts is the site's own.
 */
export function renderSignedIn(forge: ForgeKind, login: string, next: string): string {
  const body = html`<meta http-equiv="refresh" content="${`0;url=${next}`}">
<h1>Signed in</h1>
<p>Signed in with ${forgeName(forge)} as <strong data-signed-in-as>@${login}</strong>.</p>
<p><a href="${next}" data-continue>Continue</a></p>`;
  return page({ title: 'Signed in', body, signedIn: false });
}
