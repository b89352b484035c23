import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import { pathToFileURL } from 'node:url';
import { fetchPipelineFile, type PipelineSource } from '../../lib/forge/pipeline-file.ts';

const PIPELINE = 'version: 1\ntasks:\n  build: { script: [make] }\n';
const UNKNOWN_SHA = 'feedfacefeedfacefeedfacefeedfacefeedface';

let root: string;
let repo: string;
let withFile: string;
let withoutFile: string;

function git(cwd: string, ...args: string[]): string {
  return execFileSync(
    'git',
    ['-c', 'user.name=t', '-c', 'user.email=t@t', '-c', 'init.defaultBranch=main', ...args],
    { cwd, encoding: 'utf8', env: { ...process.env, GIT_CONFIG_NOSYSTEM: '1' } },
  ).trim();
}

function local(repoUrl: string, sha: string): PipelineSource {
  return {
    forge: 'gitea',
    repo: 'harbor/tidewatch',
    repoUrl,
    forgeUrl: null,
    githubApiUrl: 'https://api.github.invalid',
    token: null,
    sha,
  };
}

before(() => {
  root = mkdtempSync(join(tmpdir(), 'conductor-forge-'));
  repo = join(root, 'tidewatch');
  mkdirSync(repo);
  git(repo, 'init', '-q');
  writeFileSync(join(repo, '.conductor.yml'), PIPELINE);
  writeFileSync(join(repo, 'README'), 'tides\n');
  git(repo, 'add', '.');
  git(repo, 'commit', '-q', '-m', 'add the pipeline');
  withFile = git(repo, 'rev-parse', 'HEAD');
  git(repo, 'rm', '-q', '.conductor.yml');
  git(repo, 'commit', '-q', '-m', 'drop the pipeline');
  withoutFile = git(repo, 'rev-parse', 'HEAD');
});

after(() => rmSync(root, { recursive: true, force: true }));

describe('a local repository', () => {
  test('reads the file as committed at the first commit', async () => {
    assert.deepEqual(await fetchPipelineFile(local(repo, withFile)), {
      found: true,
      text: PIPELINE,
    });
  });

  test('finds no file at the commit that removed it', async () => {
    assert.deepEqual(await fetchPipelineFile(local(repo, withoutFile)), {
      found: false,
      reason: `no .conductor.yml at ${withoutFile}`,
    });
  });

  test('finds no file at a commit the repository does not have', async () => {
    assert.deepEqual(await fetchPipelineFile(local(repo, UNKNOWN_SHA)), {
      found: false,
      reason: `no .conductor.yml at ${UNKNOWN_SHA}`,
    });
  });

  test('reads the committed file, not the working tree', async () => {
    writeFileSync(join(repo, '.conductor.yml'), 'uncommitted: true\n');
    try {
      assert.deepEqual(await fetchPipelineFile(local(repo, withFile)), {
        found: true,
        text: PIPELINE,
      });
      assert.equal((await fetchPipelineFile(local(repo, withoutFile))).found, false);
    } finally {
      rmSync(join(repo, '.conductor.yml'));
    }
  });

  test('takes a file:// URL as well as a path', async () => {
    const url = pathToFileURL(repo).href;
    assert.deepEqual(await fetchPipelineFile(local(url, withFile)), {
      found: true,
      text: PIPELINE,
    });
  });

  test('reads a bare clone', async () => {
    const bare = join(root, 'tidewatch.git');
    git(root, 'clone', '-q', '--bare', repo, bare);
    assert.deepEqual(await fetchPipelineFile(local(bare, withFile)), {
      found: true,
      text: PIPELINE,
    });
    assert.equal((await fetchPipelineFile(local(bare, withoutFile))).found, false);
  });

  test('accepts an abbreviated sha, as git does', async () => {
    assert.deepEqual(await fetchPipelineFile(local(repo, withFile.slice(0, 12))), {
      found: true,
      text: PIPELINE,
    });
  });

  test('refuses a sha that git could read as an option or an expression', async () => {
    for (const sha of ['--output=/tmp/x', 'HEAD', `${withFile}~1`, 'main']) {
      assert.deepEqual(await fetchPipelineFile(local(repo, sha)), {
        found: false,
        reason: `${JSON.stringify(sha)} is not a commit sha`,
      });
    }
  });
});

describe('a local path that is not a usable repository', () => {
  test('a directory that is not a repository fails for good, saying so', async () => {
    const plain = join(root, 'plain');
    mkdirSync(plain, { recursive: true });
    const result = await fetchPipelineFile(local(plain, withFile));
    assert.equal(result.found, false);
    assert.match(
      result.found ? '' : result.reason,
      /^cannot read the git repository at .*plain: not a git repository/,
    );
  });

  test("a directory inside a repository's work tree does not borrow that repository", async () => {
    // Without a ceiling git would climb to the enclosing repository and find the file there.
    const inner = join(repo, 'docs');
    mkdirSync(inner, { recursive: true });
    const result = await fetchPipelineFile(local(inner, withFile));
    assert.equal(result.found, false);
    assert.match(result.found ? '' : result.reason, /not a git repository/);
  });

  test('a path that does not exist fails for good, naming it', async () => {
    const missing = join(root, 'nowhere');
    const result = await fetchPipelineFile(local(missing, withFile));
    assert.equal(result.found, false);
    assert.match(
      result.found ? '' : result.reason,
      /^cannot read the git repository at .*nowhere: cannot change to/,
    );
  });

  test('GIT_DIR in the environment does not redirect git to another repository', async () => {
    const plain = join(root, 'plain-2');
    mkdirSync(plain, { recursive: true });
    const saved = process.env.GIT_DIR;
    process.env.GIT_DIR = join(repo, '.git');
    try {
      assert.equal((await fetchPipelineFile(local(plain, withFile))).found, false);
    } finally {
      if (saved === undefined) delete process.env.GIT_DIR;
      else process.env.GIT_DIR = saved;
    }
  });

  test('without git installed, it fails for good, saying git is needed', async () => {
    const saved = process.env.PATH;
    process.env.PATH = join(root, 'empty-bin');
    try {
      assert.deepEqual(await fetchPipelineFile(local(repo, withFile)), {
        found: false,
        reason: `git is not installed here; it is needed to read the local repository ${repo}`,
      });
    } finally {
      process.env.PATH = saved;
    }
  });
});
