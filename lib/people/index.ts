// People: sessions, sign-in with a forge, what the forge lets each person do
// (cached briefly), and the audit. The decision itself (`may`) is made in
// lib/app/people.ts, which reads the project and its token; the pages get it
// handed in as a PeopleGate.
import type { AppContext } from '../context.ts';
import type { ForgeKind } from '../forge/forge.ts';
import type { OAuthForge } from './oauth.ts';
import type { Action } from './permissions.ts';
import type { Person } from './sessions.ts';

export { forgeName } from '../forge/registry.ts';
export { type AuditEntry, type AuditEvent, jobAuditEvents } from './audit.ts';
export { peopleNow, setPeopleClock } from './clock.ts';
export { finishSignIn, type OAuthForge, SignInError, STATE_COOKIE, startSignIn } from './oauth.ts';
export { ACTION_NEEDS, ACTIONS, type Action, PERMISSION_TTL_MS } from './permissions.ts';
export {
  ADMIN_BEARER,
  actorName,
  createSession,
  endSession,
  endSessionsOf,
  findSession,
  type Person,
  purgeEndedSessions,
  type SignedIn,
} from './sessions.ts';

/** Whether a person may take an action, and if not, why (the 403's words), or that the forge did not answer (503). */
export type Decision =
  | { allowed: true }
  | { allowed: false; status: 403 | 404 | 503; reason: string };

/** What the pages need of lib/app/people.ts, handed in by the api function. */
export interface PeopleGate {
  /** The one decision: may this person take this action on this project? */
  may(ctx: AppContext, person: Person, projectId: string, action: Action): Promise<Decision>;
  /** The forges one may sign in with (a client id is set), in the order shown. */
  signInForges(ctx: AppContext): Promise<ForgeKind[]>;
  /** A forge's OAuth settings with its client secret, or null when it is not configured. */
  oauthForge(ctx: AppContext, forge: string): Promise<OAuthForge | null>;
}
