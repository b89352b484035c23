import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { AppError, ValidationError, type ValidationIssue } from '../../lib/errors.ts';
import { parseWebhook } from '../../lib/forge/webhook.ts';
import { withField, without } from './fixtures/fields.ts';
import { giteaPullRequest, giteaPush } from './fixtures/gitea.ts';
import { GH_REPO, githubPing, githubPullRequest, githubPushBranch } from './fixtures/github.ts';

/** The issues a payload is rejected with. */
function issuesOf(...args: Parameters<typeof parseWebhook>): ValidationIssue[] {
  try {
    parseWebhook(...args);
  } catch (error) {
    assert.ok(error instanceof ValidationError, `expected a ValidationError, got ${String(error)}`);
    return error.issues;
  }
  assert.fail('expected the payload to be rejected');
}

describe('fields an event needs', () => {
  test('a missing field is a ValidationError naming its path', () => {
    const cases: [Parameters<typeof parseWebhook>, string][] = [
      [['github', 'push', without(githubPushBranch(), 'after')], 'after'],
      [['github', 'push', without(githubPushBranch(), 'ref')], 'ref'],
      [['gitea', 'push', without(giteaPush(), 'repository.full_name')], 'repository.full_name'],
      [['github', 'push', without(githubPushBranch(), 'repository')], 'repository'],
      [['github', 'ping', without(githubPing(), 'repository')], 'repository'],
      [['github', 'issues', { action: 'opened' }], 'repository'],
      [
        ['github', 'pull_request', without(githubPullRequest('opened'), 'pull_request.head.sha')],
        'pull_request.head.sha',
      ],
      [
        ['gitea', 'pull_request', without(giteaPullRequest('opened'), 'pull_request.base.ref')],
        'pull_request.base.ref',
      ],
      [
        ['gitea', 'pull_request', without(giteaPullRequest('opened'), 'pull_request')],
        'pull_request',
      ],
      [['github', 'pull_request', without(githubPullRequest('opened'), 'action')], 'action'],
    ];
    for (const [args, path] of cases) {
      assert.deepEqual(issuesOf(...args), [{ path, message: 'missing' }], path);
    }
  });

  test('a field of the wrong type is a ValidationError saying what was expected', () => {
    const cases: [Parameters<typeof parseWebhook>, ValidationIssue][] = [
      [
        ['github', 'push', withField(githubPushBranch(), 'after', 42)],
        { path: 'after', message: 'expected a string, got 42' },
      ],
      [
        ['github', 'push', withField(githubPushBranch(), 'deleted', 'yes')],
        { path: 'deleted', message: 'expected true or false, got "yes"' },
      ],
      [
        ['gitea', 'push', withField(giteaPush(), 'repository.full_name', null)],
        { path: 'repository.full_name', message: 'expected a string, got null' },
      ],
      [
        ['gitea', 'push', withField(giteaPush(), 'repository', [GH_REPO])],
        { path: 'repository', message: 'expected an object, got a list' },
      ],
      [
        [
          'github',
          'pull_request',
          withField(githubPullRequest('opened'), 'pull_request.head', 'x'),
        ],
        { path: 'pull_request.head', message: 'expected an object, got "x"' },
      ],
      [
        ['github', 'pull_request', withField(githubPullRequest('opened'), 'number', '57')],
        { path: 'number', message: 'expected a number, got "57"' },
      ],
      [
        ['gitea', 'pull_request', withField(giteaPullRequest('closed'), 'number', 1.5)],
        { path: 'number', message: 'expected a whole number, got 1.5' },
      ],
      [
        [
          'gitea',
          'pull_request',
          withField(giteaPullRequest('opened'), 'pull_request.head.repo', 7),
        ],
        { path: 'pull_request.head.repo', message: 'expected an object, got 7' },
      ],
    ];
    for (const [args, issue] of cases) {
      assert.deepEqual(issuesOf(...args), [issue], issue.path);
    }
  });

  test('a sha that is not 40 or 64 lower-case hex digits is rejected, naming the field', () => {
    for (const sha of ['4e7d3b2', '4E7D3B2A19C8F6E5D4C3B2A1908F7E6D5C4B3A29', 'main', '']) {
      const [issue] = issuesOf('github', 'push', withField(githubPushBranch(), 'after', sha));
      assert.equal(issue?.path, 'after');
      assert.match(
        issue?.message ?? '',
        /^expected a commit sha \(40 or 64 lower-case hex digits\), got /,
      );
    }
    const payload = withField(giteaPullRequest('opened'), 'pull_request.head.sha', 'ab12cd34');
    assert.deepEqual(issuesOf('gitea', 'pull_request', payload), [
      {
        path: 'pull_request.head.sha',
        message: 'expected a commit sha (40 or 64 lower-case hex digits), got "ab12cd34"',
      },
    ]);
  });

  test('every problem is reported at once, each with its path', () => {
    const payload = without(without(githubPushBranch(), 'after'), 'repository');
    assert.deepEqual(issuesOf('github', 'push', payload), [
      { path: 'repository', message: 'missing' },
      { path: 'after', message: 'missing' },
    ]);
  });

  test('the error is a 400 bad_request whose message lists each path', () => {
    try {
      parseWebhook(
        'github',
        'pull_request',
        without(githubPullRequest('opened'), 'pull_request.head.sha'),
      );
      assert.fail('expected a ValidationError');
    } catch (error) {
      assert.ok(error instanceof AppError);
      assert.equal(error.status, 400);
      assert.equal(error.code, 'bad_request');
      assert.equal(error.message, 'pull_request.head.sha: missing');
    }
  });

  test('a payload that is not a JSON object is rejected as a whole', () => {
    for (const [payload, got] of [
      [null, 'null'],
      [[], 'a list'],
      ['push', '"push"'],
      [3, '3'],
    ] as const) {
      assert.deepEqual(issuesOf('github', 'push', payload), [
        { path: '', message: `expected a JSON object, got ${got}` },
      ]);
    }
  });

  test('the pull request number comes from pull_request.number when the top level lacks it', () => {
    const payload = without(githubPullRequest('opened'), 'number');
    const intent = parseWebhook('github', 'pull_request', payload);
    assert.equal(intent.kind === 'build' && intent.ref, 'refs/pull/57/head');
    const closed = without(giteaPullRequest('closed'), 'number');
    assert.deepEqual(parseWebhook('gitea', 'pull_request', closed), {
      kind: 'close_pull_request',
      repo: 'harbor/tidewatch',
      pullRequest: 12,
    });
  });

  test('a pull request with no number anywhere is rejected at `number`', () => {
    const payload = without(without(githubPullRequest('closed'), 'number'), 'pull_request.number');
    assert.deepEqual(issuesOf('github', 'pull_request', payload), [
      { path: 'number', message: 'missing' },
    ]);
  });

  test('an action that builds nothing needs nothing but the action and the repository', () => {
    const payload = { action: 'labeled', repository: { full_name: GH_REPO } };
    assert.deepEqual(parseWebhook('github', 'pull_request', payload), {
      kind: 'ignore',
      repo: GH_REPO,
      reason: 'pull_request action "labeled" triggers nothing',
    });
  });
});

describe('unknown fields', () => {
  test('fields the forge adds later, at any depth, change nothing', () => {
    const extra = { introduced_in: '2031-01', nested: { anything: [1, 'two', null] } };

    const push = githubPushBranch();
    const grownPush = githubPushBranch();
    Object.assign(grownPush, extra);
    Object.assign(grownPush.repository, { custom_properties: { tier: 'gold' } }, extra);
    assert.deepEqual(
      parseWebhook('github', 'push', grownPush),
      parseWebhook('github', 'push', push),
    );

    const pr = giteaPullRequest('opened', { fromFork: true });
    const grownPr = giteaPullRequest('opened', { fromFork: true });
    for (const node of [
      grownPr,
      grownPr.pull_request,
      grownPr.pull_request.head,
      grownPr.pull_request.head.repo,
      grownPr.pull_request.base.repo,
    ]) {
      Object.assign(node, extra);
    }
    assert.deepEqual(
      parseWebhook('gitea', 'pull_request', grownPr),
      parseWebhook('gitea', 'pull_request', pr),
    );
  });

  test('fields Conductor does not read may hold anything', () => {
    const payload = { ...githubPushBranch(), commits: 'not a list', head_commit: 7, pusher: null };
    assert.equal(parseWebhook('github', 'push', payload).kind, 'build');
  });
});
