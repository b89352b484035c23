// Payload shapes the forges document beside the one today's versions send, through the real
// local HTTP server (issue #20): Gitea's documented push (no head_commit, a deprecated `secret`),
// GitHub's head_commit: null, Forgejo's headers, and pull requests with optional fields left out.
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { test } from 'node:test';
import { signBody } from '../../lib/forge/webhook.ts';
import { type Omission, thinned, withField } from '../forge/fixtures/fields.ts';
import {
  GT_PULL_REQUEST_OPTIONAL,
  GT_REPO,
  GT_SHA,
  giteaPullRequest,
  giteaPushAsDocumented,
} from '../forge/fixtures/gitea.ts';
import {
  GH_PULL_REQUEST_OPTIONAL,
  GH_REPO,
  GH_SHA,
  githubPullRequest,
  githubPushNullHeadCommit,
} from '../forge/fixtures/github.ts';
import type { TestStack } from '../helpers/stack.ts';
import { assertBadRequest, assertError, assertUnauthorized } from './assertions.ts';
import {
  countRows,
  deliverRunning,
  type Reply,
  sendWebhook,
  startE2E,
  waitForJob,
} from './calls.ts';
import { type Forge, pipeline, sha, ZERO_SHA } from './payloads.ts';

const { fake, stack, projects } = await startE2E(import.meta.filename, {
  projects: {
    github: { forge: 'github', id: 'shapes-github', repo: GH_REPO },
    gitea: { forge: 'gitea', id: 'shapes-gitea', repo: GT_REPO },
  },
});
const YML = pipeline('webhook-shapes', '  build:\n    script: [make]\n');

/** Serves the pipeline at `commit` of the forge's fixture repository and answers the commit. */
function pushable(forge: Forge, commit: string): string {
  fake.setFile(forge === 'github' ? GH_REPO : GT_REPO, commit, YML);
  return commit;
}

/** Sends a delivery to the Gitea route the way Forgejo does: its own X-Forgejo-* headers only. */
function sendForgejo(
  stack: TestStack,
  event: string | null,
  payload: unknown,
  opts: { secret?: string; delivery?: string } = {},
): Promise<Reply> {
  const raw = Buffer.from(JSON.stringify(payload));
  const headers: Record<string, string> = {
    'content-type': 'application/json',
    'user-agent': 'Go-http-client/1.1',
    'X-Forgejo-Delivery': opts.delivery ?? randomUUID(),
  };
  if (event !== null) {
    headers['X-Forgejo-Event'] = event;
    headers['X-Forgejo-Event-Type'] = event;
  }
  if (opts.secret !== undefined)
    headers['X-Forgejo-Signature'] = signBody('gitea', raw, opts.secret);
  return stack.call('POST', '/v1/webhooks/gitea', { raw, headers });
}

test("Gitea's documented push shape (no head_commit, a deprecated secret field) runs the pushed commit", async () => {
  const after = pushable('gitea', sha('documented-push'));
  const { view } = await deliverRunning(
    stack,
    'gitea',
    'push',
    giteaPushAsDocumented({ after }),
    projects.gitea.secret,
  );
  assert.equal(view.job.trigger, 'push');
  assert.equal(view.job.ref, 'refs/heads/develop');
  assert.equal(view.job.sha, after);
  assert.equal(view.job.trusted, true);
});

test("the payload's secret field is never trusted: the project's own secret in it, with a wrong or no signature, answers 401", async () => {
  const after = pushable('gitea', sha('secret-in-payload'));
  const jobs = await countRows(stack, 'jobs');
  const payload = giteaPushAsDocumented({ secret: projects.gitea.secret, after });
  assertUnauthorized(
    await sendWebhook(stack, 'gitea', 'push', payload, {
      secret: `${projects.gitea.secret}-not-it`,
    }),
  );
  assertUnauthorized(await sendWebhook(stack, 'gitea', 'push', payload));
  assertUnauthorized(await sendForgejo(stack, 'push', payload));
  assert.equal(await countRows(stack, 'jobs'), jobs, 'nothing was written');
  assert.equal(fake.requestsFor(after).length, 0, 'nothing was compiled');
});

test('a GitHub push with head_commit: null runs `after`', async () => {
  const after = pushable('github', sha('null-head-commit'));
  const { view } = await deliverRunning(
    stack,
    'github',
    'push',
    { ...githubPushNullHeadCommit(), after },
    projects.github.secret,
  );
  assert.equal(view.job.ref, 'refs/heads/release/2.4');
  assert.equal(view.job.sha, after);
});

test('a Forgejo delivery (X-Forgejo-* headers only) runs on the Gitea route; its delivery id dedupes and its signature is checked', async () => {
  const after = pushable('gitea', sha('forgejo-push'));
  const payload = giteaPushAsDocumented({ after });
  const delivery = randomUUID();
  const secret = projects.gitea.secret;

  assertBadRequest(await sendForgejo(stack, null, payload, { secret }), 'X-Forgejo-Event');
  assertUnauthorized(await sendForgejo(stack, 'push', payload, { secret: `${secret}x` }));

  const hook = await sendForgejo(stack, 'push', payload, { secret, delivery });
  assert.equal(hook.status, 202, hook.text);
  const view = await waitForJob(stack, hook.body.job_id);
  assert.equal(view.job.state, 'running', JSON.stringify(view.job));
  assert.equal(view.job.sha, after);

  const again = await sendForgejo(stack, 'push', payload, { secret, delivery });
  assert.equal(again.status, 200, again.text);
  assert.deepEqual(again.body, {
    job_id: hook.body.job_id,
    number: hook.body.number,
    duplicate: true,
  });
});

test("the contract's check order holds for Gitea's documented push shape", async () => {
  const secret = projects.gitea.secret;
  const after = pushable('gitea', sha('documented-order'));
  const payload = giteaPushAsDocumented({ after });
  const jobs = await countRows(stack, 'jobs');

  const huge = withField(giteaPushAsDocumented({ after }), 'padding', 'x'.repeat(5 * 1024 * 1024));
  assertError(
    await sendWebhook(stack, 'gitea', 'push', huge, { secret }),
    413,
    'payload_too_large',
  );
  // A field the push needs, before the project is looked up or the signature checked.
  const { after: _after, ...noAfter } = payload;
  assertBadRequest(await sendWebhook(stack, 'gitea', 'push', noAfter), 'after');
  const unknown = withField(giteaPushAsDocumented({ after }), 'repository.full_name', 'nobody/x');
  assertError(await sendWebhook(stack, 'gitea', 'push', unknown), 404, 'not_found');
  assertUnauthorized(await sendWebhook(stack, 'gitea', 'push', payload));
  const deleted = giteaPushAsDocumented({ after: ZERO_SHA });
  const ignored = await sendWebhook(stack, 'gitea', 'push', deleted, { secret });
  assert.equal(ignored.status, 200, ignored.text);
  assert.equal(ignored.body.ignored, 'deleted ref refs/heads/develop');
  assert.equal(await countRows(stack, 'jobs'), jobs, 'nothing but a 202 writes a job');

  const delivery = randomUUID();
  const accepted = await sendWebhook(stack, 'gitea', 'push', payload, { secret, delivery });
  assert.equal(accepted.status, 202, accepted.text);
  const duplicate = await sendWebhook(stack, 'gitea', 'push', payload, { secret, delivery });
  assert.equal(duplicate.status, 200, duplicate.text);
  assert.equal(duplicate.body.duplicate, true);
  assert.equal(duplicate.body.job_id, accepted.body.job_id);
});

const PULL_REQUESTS: {
  forge: Forge;
  build: () => object;
  close: () => object;
  optional: readonly string[];
  number: number;
  head: string;
  baseRef: string;
}[] = [
  {
    forge: 'github',
    build: () => githubPullRequest('opened'),
    close: () => githubPullRequest('closed'),
    optional: GH_PULL_REQUEST_OPTIONAL,
    number: 57,
    head: GH_SHA.prHead,
    baseRef: 'main',
  },
  {
    forge: 'gitea',
    build: () => giteaPullRequest('synchronized'),
    close: () => giteaPullRequest('closed'),
    optional: GT_PULL_REQUEST_OPTIONAL,
    number: 12,
    head: GT_SHA.prHead,
    baseRef: 'main',
  },
];

for (const pr of PULL_REQUESTS) {
  for (const how of ['absent', 'null'] as Omission[]) {
    test(`a ${pr.forge} pull request with every optional field ${how} builds its head; a closed one as thin cancels it`, async () => {
      const secret = projects[pr.forge].secret;
      pushable(pr.forge, pr.head);
      const payload = thinned(pr.build(), pr.optional, how);
      const hook = await sendWebhook(stack, pr.forge, 'pull_request', payload, { secret });
      assert.equal(hook.status, 202, hook.text);
      const view = await waitForJob(stack, hook.body.job_id);
      assert.equal(view.job.trigger, 'pull_request');
      assert.equal(view.job.ref, `refs/pull/${pr.number}/head`);
      assert.equal(view.job.sha, pr.head);
      assert.equal(view.job.base_ref, pr.baseRef);
      if (pr.forge === 'github') {
        // GitHub's trust comes from the payload (head repository = base repository). A Gitea
        // pull request's is the forge's to confirm (the contract's AGit rule), not this test's.
        assert.equal(view.job.state, 'running', JSON.stringify(view.job));
        assert.equal(view.job.trusted, true);
      }

      const closed = thinned(pr.close(), [...pr.optional, 'pull_request'], how);
      const res = await sendWebhook(stack, pr.forge, 'pull_request', closed, { secret });
      assert.equal(res.status, 200, res.text);
      assert.equal(res.body.ignored, `pull request #${pr.number} was closed`);
      assert.equal(res.body.cancelled, 1);
      await waitForJob(stack, view.job.id, (v) => v.job.state === 'cancelled');
    });
  }
}
