import assert from 'node:assert/strict';
import type { IncomingMessage, ServerResponse } from 'node:http';
import { after, before, describe, test } from 'node:test';
import { allowPrivateForges } from '../../lib/forge/client.ts';
import {
  type FetchResult,
  ForgeUnavailableError,
  fetchPipelineFile,
  isLocalRepo,
  type PipelineSource,
} from '../../lib/forge/pipeline-file.ts';
import type { ForgeKind } from '../../lib/forge/webhook.ts';
import { closedPortUrl, type FakeForge, fakeForge } from './helpers.ts';

// The fake forge is on loopback, which the forge client refuses otherwise
// (test/forge/client.test.ts).
allowPrivateForges(true);

const SHA = '4e7d3b2a19c8f6e5d4c3b2a1908f7e6d5c4b3a29';
const PIPELINE = 'version: 1\ntasks:\n  test: { script: [make test] } # ✓ naïve café\n';

function source(
  forge: ForgeKind,
  base: string,
  overrides: Partial<PipelineSource> = {},
): PipelineSource {
  return {
    forge,
    repo: forge === 'github' ? 'northwind/ledger' : 'harbor/tidewatch',
    repoUrl:
      forge === 'github'
        ? 'https://github.com/northwind/ledger.git'
        : `${base}/harbor/tidewatch.git`,
    forgeUrl: forge === 'gitea' ? base : null,
    githubApiUrl: forge === 'github' ? base : 'https://api.github.invalid',
    token: 'tok_3f9a',
    sha: SHA,
    ...overrides,
  };
}

/** The error a fetch is rejected with, which must be a ForgeUnavailableError. */
async function unavailable(promise: Promise<FetchResult>): Promise<ForgeUnavailableError> {
  try {
    const result = await promise;
    assert.fail(`expected ForgeUnavailableError, got ${JSON.stringify(result)}`);
  } catch (error) {
    assert.ok(
      error instanceof ForgeUnavailableError,
      `expected ForgeUnavailableError, got ${String(error)}`,
    );
    return error;
  }
}

// One server for the whole file; each test sets how it answers.
let answer: (req: IncomingMessage, res: ServerResponse) => void = (_req, res) => res.end();
let forge: FakeForge;
before(async () => {
  forge = await fakeForge((req, res) => answer(req, res));
});
after(() => forge.close());

function serve(status: number, body = '', headers: Record<string, string> = {}) {
  forge.requests.length = 0;
  answer = (_req, res) => {
    res.writeHead(status, { 'content-type': 'text/plain; charset=utf-8', ...headers });
    res.end(body);
  };
}

describe('GitHub contents API', () => {
  test('asks for the raw file at the sha with the token, API version and a user agent', async () => {
    serve(200, PIPELINE);
    const result = await fetchPipelineFile(source('github', forge.base));
    assert.deepEqual(result, { found: true, text: PIPELINE });
    assert.equal(forge.requests.length, 1);
    const [seen] = forge.requests;
    assert.equal(seen?.method, 'GET');
    assert.equal(seen?.url, `/repos/northwind/ledger/contents/.conductor.yml?ref=${SHA}`);
    assert.equal(seen?.headers.accept, 'application/vnd.github.raw+json');
    assert.equal(seen?.headers.authorization, 'Bearer tok_3f9a');
    assert.equal(seen?.headers['x-github-api-version'], '2022-11-28');
    assert.match(seen?.headers['user-agent'] ?? '', /\S/);
  });

  test('sends no Authorization header without a token', async () => {
    serve(200, PIPELINE);
    await fetchPipelineFile(source('github', forge.base, { token: null }));
    assert.equal(forge.requests[0]?.headers.authorization, undefined);
  });

  test('keeps the path of an Enterprise API base, with or without a trailing slash', async () => {
    for (const api of [`${forge.base}/api/v3`, `${forge.base}/api/v3/`]) {
      serve(200, PIPELINE);
      await fetchPipelineFile(source('github', forge.base, { githubApiUrl: api }));
      assert.equal(
        forge.requests[0]?.url,
        `/api/v3/repos/northwind/ledger/contents/.conductor.yml?ref=${SHA}`,
      );
    }
  });

  test('URL-encodes the owner and repository segments', async () => {
    serve(200, PIPELINE);
    await fetchPipelineFile(source('github', forge.base, { repo: 'north wind/led#ger?' }));
    assert.equal(
      forge.requests[0]?.url,
      `/repos/north%20wind/led%23ger%3F/contents/.conductor.yml?ref=${SHA}`,
    );
  });
});

describe('Gitea raw file API', () => {
  test('asks for the raw file at the sha with a token Authorization header', async () => {
    serve(200, PIPELINE);
    const result = await fetchPipelineFile(source('gitea', forge.base));
    assert.deepEqual(result, { found: true, text: PIPELINE });
    const [seen] = forge.requests;
    assert.equal(seen?.method, 'GET');
    assert.equal(seen?.url, `/api/v1/repos/harbor/tidewatch/raw/.conductor.yml?ref=${SHA}`);
    assert.equal(seen?.headers.authorization, 'token tok_3f9a');
  });

  test('accepts a forge URL with a trailing slash or a sub-path', async () => {
    for (const [forgeUrl, prefix] of [
      [`${forge.base}/`, ''],
      [`${forge.base}//`, ''],
      [`${forge.base}/git/`, '/git'],
    ] as const) {
      serve(200, PIPELINE);
      await fetchPipelineFile(source('gitea', forge.base, { forgeUrl, token: null }));
      assert.equal(
        forge.requests[0]?.url,
        `${prefix}/api/v1/repos/harbor/tidewatch/raw/.conductor.yml?ref=${SHA}`,
      );
      assert.equal(forge.requests[0]?.headers.authorization, undefined);
    }
  });

  test('a Gitea project without a forge URL cannot be read', async () => {
    const result = await fetchPipelineFile(source('gitea', forge.base, { forgeUrl: null }));
    assert.deepEqual(result, {
      found: false,
      reason: 'the project has no forge_url: the Gitea base URL is needed',
    });
  });
});

for (const kind of ['github', 'gitea'] as const) {
  describe(`${kind}: what each answer means`, () => {
    test('404: there is no pipeline file at that commit', async () => {
      serve(404, '{"message":"Not Found"}');
      assert.deepEqual(await fetchPipelineFile(source(kind, forge.base)), {
        found: false,
        reason: `no .conductor.yml at ${SHA}`,
      });
    });

    test('401 and 403: the token is refused, which no retry fixes', async () => {
      const repo = source(kind, forge.base).repo;
      for (const status of [401, 403]) {
        serve(status, '{"message":"Bad credentials"}');
        assert.deepEqual(await fetchPipelineFile(source(kind, forge.base)), {
          found: false,
          reason: `the forge refused access to ${repo} (HTTP ${status}): check the project's forge token`,
        });
      }
    });

    test('500 and 502: the forge is unavailable, naming its URL and the status', async () => {
      for (const status of [500, 502, 503]) {
        serve(status, 'upstream trouble');
        const error = await unavailable(fetchPipelineFile(source(kind, forge.base)));
        assert.ok(error.message.includes(forge.base), error.message);
        assert.ok(error.message.includes(`HTTP ${status}`), error.message);
      }
    });

    test('429, and 403 with an exhausted rate limit, are a wait rather than a refusal', async () => {
      for (const [status, headers] of [
        [429, { 'retry-after': '30' }],
        [403, { 'x-ratelimit-remaining': '0', 'x-ratelimit-reset': '1717500000' }],
        [403, { 'retry-after': '60' }],
      ] as const) {
        serve(status, '{"message":"API rate limit exceeded"}', headers);
        const error = await unavailable(fetchPipelineFile(source(kind, forge.base)));
        assert.match(error.message, new RegExp(`rate-limited the request \\(HTTP ${status}\\)`));
      }
    });

    test('any other status fails for good, naming it', async () => {
      serve(422, '{"message":"No commit found for the ref"}');
      const result = await fetchPipelineFile(source(kind, forge.base));
      assert.equal(result.found, false);
      assert.match(result.found ? '' : result.reason, /answered HTTP 422 for \.conductor\.yml at /);
    });

    test('a refused connection is unavailable, naming the forge URL', async () => {
      const closed = await closedPortUrl();
      const error = await unavailable(fetchPipelineFile(source(kind, closed)));
      assert.ok(error.message.includes(closed), error.message);
      assert.match(error.message, /could not be reached \(.*ECONNREFUSED/);
    });

    test('a forge that never answers times out as unavailable', async () => {
      forge.requests.length = 0;
      answer = () => {}; // never answers
      // The forge never answers: only the timeout ends the call, which the
      // message names, and it is not retried.
      const error = await unavailable(
        fetchPipelineFile(source(kind, forge.base), { timeoutMs: 150 }),
      );
      assert.match(error.message, /could not be reached \(no answer within 150 ms\)/);
      assert.equal(forge.requests.length, 1);
    });

    test('a forge that stalls in the middle of the body times out too', async () => {
      answer = (_req, res) => {
        res.writeHead(200, { 'content-type': 'text/plain' });
        res.write('version: 1\n'); // and nothing more
      };
      const error = await unavailable(
        fetchPipelineFile(source(kind, forge.base), { timeoutMs: 150 }),
      );
      assert.match(error.message, /broke off its answer \(no answer within 150 ms\)/);
    });
  });
}

describe('reading the body', () => {
  test('a file over 1 MiB still reaches the compiler, which reports its size', async () => {
    const text = `# ${'x'.repeat(1024 * 1024)}\n`;
    serve(200, text);
    assert.deepEqual(await fetchPipelineFile(source('gitea', forge.base)), { found: true, text });
  });

  test('a body past 4 MiB is refused without holding it', async () => {
    const huge = 'y'.repeat(4 * 1024 * 1024 + 1);
    // Declared up front, and streamed without a length.
    for (const headers of [{ 'content-length': String(huge.length) }, {}]) {
      answer = (_req, res) => {
        res.writeHead(200, headers);
        res.end(huge);
      };
      assert.deepEqual(await fetchPipelineFile(source('github', forge.base)), {
        found: false,
        reason: `.conductor.yml at ${SHA} is larger than 4 MiB`,
      });
    }
  });

  test('a repo that is not owner/name is refused before asking the forge', async () => {
    forge.requests.length = 0;
    for (const repo of ['ledger', 'a/b/c', '/ledger', 'northwind/']) {
      const result = await fetchPipelineFile(source('github', forge.base, { repo }));
      assert.deepEqual(result, {
        found: false,
        reason: `the project's repo ${JSON.stringify(repo)} is not owner/name`,
      });
    }
    assert.equal(forge.requests.length, 0);
  });
});

describe('isLocalRepo', () => {
  test('an absolute path or a file:// URL is local; anything a forge serves is not', () => {
    for (const url of [
      '/srv/git/ledger',
      '/srv/git/ledger.git',
      'file:///srv/git/ledger',
      'FILE:///x',
    ]) {
      assert.equal(isLocalRepo(url), true, url);
    }
    for (const url of [
      'https://github.com/northwind/ledger.git',
      'http://git.harbor.example/harbor/tidewatch.git',
      'git@github.com:northwind/ledger.git',
      'ssh://git@git.harbor.example:2222/harbor/tidewatch.git',
      'relative/path',
      '',
    ]) {
      assert.equal(isLocalRepo(url), false, url);
    }
  });
});
