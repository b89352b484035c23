// A fake forge that also takes commit statuses: a real HTTP server on loopback
// that records every POST to the statuses endpoints of GitHub and Gitea and
// hands everything else (the pipeline file reads) to a fake-forge.ts behind it.
//
//   GitHub  POST /repos/{owner}/{repo}/statuses/{sha}
//   Gitea   POST /api/v1/repos/{owner}/{repo}/statuses/{sha}
//
// It answers 201 with the created status, as both forges do; 422 for a body the
// forge would refuse (a state it does not know, no context); 401 without an
// Authorization header. It can be told to be down (a status, or a dropped
// connection) for statuses only or for everything, and to hold status requests
// unanswered until released, so a test can change state while a post is in flight.
import {
  createServer,
  type IncomingHttpHeaders,
  type IncomingMessage,
  request,
  type Server,
  type ServerResponse,
} from 'node:http';
import type { AddressInfo } from 'node:net';
import { after } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import { type FakeForge, type Outage, startFakeForge } from './fake-forge.ts';

export type { Outage } from './fake-forge.ts';

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

export interface FakeStatusForge {
  /** `http://127.0.0.1:<port>`: GitHub's API base and Gitea's forge_url. */
  url: string;
  /** The fake-forge.ts behind it, which serves the pipeline files and records their reads. */
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

/** Starts the fake on a free loopback port; it is closed when the test file ends. */
export async function startFakeStatusForge(): Promise<FakeStatusForge> {
  const files = await startFakeForge();
  const statuses: StatusPost[] = [];
  let outage: { how: Outage; opts: DownOptions } | null = null;
  let gate: { promise: Promise<void>; open: () => void } | null = null;
  let nextId = 1;

  function answerOutage(res: ServerResponse, how: Outage, opts: DownOptions): number | 'reset' {
    if (how === 'reset') {
      res.socket?.destroy();
      return 'reset';
    }
    return json(res, how, { message: 'Server Error' }, opts.headers);
  }

  function proxy(req: IncomingMessage, res: ServerResponse) {
    const target = new URL(req.url ?? '/', files.url);
    const upstream = request(
      target,
      { method: req.method, headers: { ...req.headers, host: target.host } },
      (answer) => {
        res.writeHead(answer.statusCode ?? 502, answer.headers);
        answer.pipe(res);
      },
    );
    // The fake behind dropped the connection: drop ours too.
    upstream.on('error', () => res.socket?.destroy());
    req.pipe(upstream);
  }

  async function status(
    req: IncomingMessage,
    res: ServerResponse,
    api: 'github' | 'gitea',
    match: RegExpExecArray,
  ) {
    const chunks: Buffer[] = [];
    for await (const chunk of req) chunks.push(chunk as Buffer);
    const raw = Buffer.concat(chunks).toString('utf8');
    let body: unknown = null;
    try {
      body = JSON.parse(raw);
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

    if (outage) {
      record.answered = answerOutage(res, outage.how, outage.opts);
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

  const server: Server = createServer((req, res) => {
    const { pathname } = new URL(req.url ?? '/', 'http://fake');
    const github = GITHUB_STATUS.exec(pathname);
    const gitea = GITEA_STATUS.exec(pathname);
    if (req.method === 'POST' && (github || gitea)) {
      status(req, res, gitea ? 'gitea' : 'github', (gitea ?? github)!).catch(() =>
        res.socket?.destroy(),
      );
      return;
    }
    if (outage?.opts.files) {
      req.resume();
      answerOutage(res, outage.how, outage.opts);
      return;
    }
    proxy(req, res);
  });

  await new Promise<void>((done, fail) => {
    server.once('error', fail);
    server.listen(0, '127.0.0.1', () => done());
  });
  const { port } = server.address() as AddressInfo;
  let closed = false;
  const fake: FakeStatusForge = {
    url: `http://127.0.0.1:${port}`,
    files,
    statuses,
    setFile(repo, sha, text, path) {
      files.setFile(repo, sha, text, path);
    },
    statusesFor(sha) {
      return statuses.filter((s) => s.sha.toLowerCase() === sha.toLowerCase());
    },
    acceptedFor(sha) {
      return fake
        .statusesFor(sha)
        .filter((s) => typeof s.answered === 'number' && s.answered < 300);
    },
    down(how = 500, opts = {}) {
      outage = { how, opts };
    },
    up() {
      outage = null;
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
        const seen = fake.statusesFor(sha);
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
    close() {
      if (closed) return Promise.resolve();
      closed = true;
      gate?.open();
      return new Promise<void>((done) => {
        server.closeAllConnections();
        server.close(() => done());
      });
    },
  };
  after(() => fake.close());
  return fake;
}
