// The one interface every forge implements (lib/forge/<name>/): what differs
// between GitHub, Gitea (and Forgejo through it) and GitLab, and nothing else.
// The operations around it live once in lib/forge/: the HTTP client with its
// timeouts, size caps and address guard (client.ts), paging and the reading
// of answers (pipeline-file.ts, compare.ts, branch.ts, permission.ts,
// statuses.ts, hooks.ts), the webhook's header reading (webhook.ts), and git
// for repositories on this machine. Each takes the project's forge from the
// registry (registry.ts) and asks it for URLs, headers and the meaning of an
// answer; the rest of the code never names a forge.
//
// To add a forge: write lib/forge/<name>/index.ts exporting a `Forge`, add it
// to registry.ts and its name to FORGES in lib/states.ts (with a migration for
// the CHECK constraints that list them), and a route in lib/http/routes.ts.
import type { Forge as ForgeKind } from '../states.ts';

export type { ForgeKind };

/** The header names of one webhook dialect. */
export interface HeaderNames {
  event: string;
  delivery: string;
  signature: string;
}

/** Where a project's forge is: GitHub's API from configuration, the others under the project's forge_url. */
export interface ApiUrls {
  githubApiUrl: string;
  forgeUrl: string | null;
}

export type WebhookIntent =
  | { kind: 'ignore'; repo: string; reason: string }
  | {
      kind: 'build';
      repo: string;
      trigger: 'push' | 'tag' | 'pull_request';
      ref: string;
      sha: string;
      baseRef: string | null;
      pullRequest: number | null;
      trusted: boolean;
      /**
       * Only where the forge lets readers open a pull request from the base repository (Gitea's
       * AGit `refs/for/...` push): the logins whose write access the forge must confirm before
       * the job is trusted (`trusted` is false until then). Empty when the payload names nobody.
       */
      confirmWriters?: string[];
      /**
       * Bot accounts behind the code (see isBotAccount): the sender or author of a pull request,
       * or the sender of a push to a branch other than the repository's default branch. Absent
       * when there is none. Whether they are trusted is the project's `bot_pull_requests`.
       */
      bots?: string[];
    }
  | { kind: 'close_pull_request'; repo: string; pullRequest: number };

/** What a push says of its own diff, read leniently: a field missing or odd is left unknown. */
export interface PushDiff {
  /** The commit before the push; null when the payload does not say or the branch is new. */
  before: string | null;
  /** GitHub's `forced`; Gitea and GitLab do not say, so their force pushes are taken for plain ones. */
  forced: boolean;
  /** The push made the branch (`created`, or an all-zero `before`). */
  created: boolean;
  /**
   * The files the commits list (added, removed, modified), when that list is complete; null
   * when it may not be: a commit without its lists, more commits than the payload holds, or no
   * commits at all.
   */
  files: string[] | null;
}

/** What a person may do on a repository, as Conductor reads the forge's answer. */
export type RepoPermission = 'none' | 'read' | 'write' | 'admin';

/** One status as Conductor keeps it (lib/scheduler/outbox.ts), before the forge's words for it. */
export interface StatusBody {
  /** Conductor's state: pending, success, failure, error, warning. */
  state: string;
  context: string;
  description: string;
  targetUrl?: string;
}

/** A request to the forge, before the shared client makes it. */
export interface ForgeRequest {
  method?: 'GET' | 'POST' | 'PATCH' | 'DELETE';
  url: string;
  /** A JSON body. */
  body?: unknown;
  /** Accept header, when not the forge's usual one. */
  accept?: string;
}

/** The webhook a project asks the forge to send (lib/forge/hooks.ts). */
export interface HookSpec {
  /** Where deliveries go: `<public URL>/v1/webhooks/<forge>`. */
  url: string;
  secret: string;
}

/** One forge: its URLs, headers, webhook dialect and the meaning of its answers. */
export interface Forge {
  readonly kind: ForgeKind;
  /** How people call it: `GitHub`, `Gitea`, `GitLab`. */
  readonly title: string;
  /** What a project's `repo` is on this forge, for messages (`owner/name`, `group/sub/name`). */
  readonly repoShape: string;
  /** Whether `repo` has that shape. */
  isRepo(repo: string): boolean;
  /**
   * The project's forge_url: `required` (Gitea: the instance may be anywhere), a `default`
   * (GitLab: gitlab.com), or neither (GitHub, whose API base is configuration).
   */
  readonly forgeUrl: { required: boolean; default?: string };

  /** The API base without a trailing slash, or null when the project has no forge_url and needs one. */
  apiBase(urls: ApiUrls): string | null;
  /** The headers of every call: accept, the auth scheme for the token, API version, user agent. */
  headers(token: string | null, accept?: string): Record<string, string>;

  readonly webhook: {
    /** The forge's own header names. */
    readonly headers: HeaderNames;
    /** Other names the same headers arrive under, read when the forge's own is absent. */
    readonly aliases: readonly HeaderNames[];
    /** Constant-time check of the signature (or token) header for this body and secret. */
    verify(rawBody: Buffer, secret: string, header: string | undefined): boolean;
    /** The header value the forge would send (tests, the demo, the CLI). */
    sign(rawBody: Buffer, secret: string): string;
    /** What a delivery asks for (a ValidationError naming the field when it cannot be read). */
    parse(event: string, payload: unknown): WebhookIntent;
    /** A push's own diff, for `changes:` filters. */
    pushDiff(payload: unknown): PushDiff;
    /** The repository's default branch as the payload says it, if it says. */
    defaultBranch(payload: unknown): string | undefined;
    /** The forge's name for the webhook's content type setting, for the not-JSON message. */
    readonly contentTypeSetting: string;
    /** The clone URL and (where the forge has one) the base URL a payload tells of, for the create command. */
    describe(payload: unknown, repo: string): { cloneUrl?: string; forgeUrl?: string };
  };

  /** The pipeline file (or another file) at a commit; a 200 answers its raw bytes. */
  file(api: string, repo: string, sha: string, path: string): ForgeRequest;

  /** The forge's state for Conductor's, and the request that posts it. */
  status(api: string, repo: string, sha: string, body: StatusBody): ForgeRequest;

  readonly compare: {
    /** One page of `base...head` (the files changed on head since the merge base). */
    page(api: string, repo: string, base: string, head: string, page: number): ForgeRequest;
    /** The file names on one page's answer (old paths of renames too); null when it is not a comparison. */
    files(body: unknown): string[] | null;
    /** Why the forge's answer may not hold every file (its cap, its timeout), or null. */
    incomplete(body: unknown, pageFiles: number, page: number): string | null;
  };

  readonly branch: {
    /** A branch's or tag's head commit. */
    head(api: string, repo: string, name: string, isTag: boolean): ForgeRequest;
    /** The sha in that answer. */
    sha(body: unknown): unknown;
    /** The repository, whose answer names its default branch (`default_branch` on every forge). */
    repository(api: string, repo: string): ForgeRequest;
  };

  readonly permission: {
    /** What `login` may do on `repo`, asked with the project's token. */
    ask(api: string, repo: string, login: string): ForgeRequest;
    /** The answer read; null when it names nothing Conductor knows. A 404 is taken for no access. */
    read(body: unknown, login: string): RepoPermission | null;
    /**
     * Whether a pull request from the base repository waits for the forge to confirm its people
     * as writers (Gitea: anyone who reads may open one with the AGit flow).
     */
    readonly confirmsWriters: boolean;
  };

  readonly oauth: {
    /** The configuration variables of its sign-in (lib/config.ts): the base URL, client id and secret. */
    readonly settings: { url: string; clientId: string; clientSecret: string };
    /** The same settings' fields in the deployed app secret (docs/deploy.md, "Sign-in"). */
    readonly store: { url: string; clientId: string; clientSecret: string };
    /** The base URL when neither names one (GitHub's, GitLab's public instance); none: required. */
    readonly defaultUrl?: string;
    /** Identity scopes only: GitHub's public profile needs none. */
    readonly scope: string;
    authorizeUrl(oauthBase: string): string;
    tokenUrl(oauthBase: string): string;
    /** The API base for the signed-in person's own token (`/user` is read there). */
    apiUrl(oauthBase: string): string;
    /** The person's login in the answer of `/user`. */
    login(body: unknown): unknown;
  };

  readonly hooks: {
    create(api: string, repo: string, hook: HookSpec): ForgeRequest;
    /** The new hook's id in the answer of `create`. */
    id(body: unknown): unknown;
    delete(api: string, repo: string, id: string): ForgeRequest;
  };

  /** The repositories a token can see, to add one as a project from the page (lib/forge/repos.ts). */
  readonly repos: {
    /** One page (from 1) of the token's repositories, at most `perPage`. */
    list(api: string, page: number, perPage: number): ForgeRequest;
    /** One repository of that list (or of `branch.repository`'s answer); null when unreadable. */
    read(body: unknown): RepoListing | null;
  };
}

/** A repository as the forge lists it for the token that asked. */
export interface RepoListing {
  /** The project's `repo`: `owner/name` (GitLab: `group/sub/name`). */
  repo: string;
  /** What runners clone (https). */
  cloneUrl: string;
  private: boolean;
  /** Whether the token may manage the repository's webhooks (an administrator of it). */
  admin: boolean;
}

/** Each path segment percent-encoded, the slashes kept: `owner/name` in a URL. */
export const pathOf = (repo: string) => repo.split('/').map(encodeURIComponent).join('/');

/** `base...head` of a compare URL, each side percent-encoded (GitHub's and Gitea's). */
export const basehead = (base: string, head: string) =>
  `${encodeURIComponent(base)}...${encodeURIComponent(head)}`;

/** A commit status as GitHub's API takes it, which Gitea's mirrors. */
export const repoStatusRequest: Forge['status'] = (api, repo, sha, s) => ({
  method: 'POST',
  url: `${api}/repos/${pathOf(repo)}/statuses/${sha}`,
  body: {
    state: s.state,
    context: s.context,
    description: s.description,
    ...(s.targetUrl ? { target_url: s.targetUrl } : {}),
  },
});

/** The repository at GitHub's path, which Gitea's mirrors (its answer names the default branch). */
export const hubRepositoryRequest: Forge['branch']['repository'] = (api, repo) => ({
  url: `${api}/repos/${pathOf(repo)}`,
});

/** A collaborator's permission at GitHub's path, which Gitea's mirrors. */
export const hubPermissionRequest: Forge['permission']['ask'] = (api, repo, login) => ({
  url: `${api}/repos/${pathOf(repo)}/collaborators/${encodeURIComponent(login)}/permission`,
});

/**
 * A repository's webhooks at GitHub's paths, which Gitea's mirror; the two differ only in the
 * hook's kind (`{name: 'web'}`, `{type: 'gitea'}`) and GitHub's `insecure_ssl`.
 */
export function hubHooks(
  kind: Record<string, string>,
  extraConfig: Record<string, string> = {},
): Forge['hooks'] {
  return {
    create: (api, repo, hook) => ({
      method: 'POST',
      url: `${api}/repos/${pathOf(repo)}/hooks`,
      body: {
        ...kind,
        active: true,
        events: ['push', 'pull_request'],
        config: { url: hook.url, content_type: 'json', secret: hook.secret, ...extraConfig },
      },
    }),
    id: (body) => (body as { id?: unknown } | null)?.id,
    delete: (api, repo, id) => ({
      method: 'DELETE',
      url: `${api}/repos/${pathOf(repo)}/hooks/${encodeURIComponent(id)}`,
    }),
  };
}

/** A repository as GitHub's API answers it, which Gitea's mirrors (`full_name`, `clone_url`, `permissions.admin`). */
export const readRepoListing: Forge['repos']['read'] = (body) => {
  const r = body as {
    full_name?: unknown;
    clone_url?: unknown;
    private?: unknown;
    permissions?: { admin?: unknown } | null;
  } | null;
  if (!r || typeof r.full_name !== 'string' || typeof r.clone_url !== 'string') return null;
  return {
    repo: r.full_name,
    cloneUrl: r.clone_url,
    private: r.private === true,
    admin: r.permissions?.admin === true,
  };
};

// GitHub refuses API requests without a User-Agent.
export const USER_AGENT = 'conductor-ci';
