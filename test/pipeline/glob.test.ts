import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { globMatch } from '../../lib/pipeline/glob.ts';
import { refMatches, type Trigger } from '../../lib/pipeline/index.ts';

const push = (ref: string): Trigger => ({ ref, event: 'push' });
const tag = (ref: string): Trigger => ({ ref, event: 'tag' });
const pr = (n: number, baseRef: string | null): Trigger => ({
  ref: `refs/pull/${n}/head`,
  event: 'pull_request',
  baseRef,
});

describe('globMatch', () => {
  test('a star matches any run of characters, including none and slashes', () => {
    assert.ok(globMatch('release/*', 'release/1.2'));
    assert.ok(globMatch('release/*', 'release/'));
    assert.ok(globMatch('release/*', 'release/a/b/c'));
    assert.ok(globMatch('*', ''));
    assert.ok(globMatch('*', 'a/b'));
    assert.ok(globMatch('a*b*c', 'a-x-b-y-c'));
    assert.ok(globMatch('**', 'anything'));
    assert.ok(!globMatch('a*b', 'a-x-c'));
  });

  test('everything but the star is literal: a dot is a dot', () => {
    assert.ok(globMatch('v1.2', 'v1.2'));
    assert.ok(!globMatch('v1.2', 'v1x2'));
    assert.ok(!globMatch('v1.*', 'v1x2'));
  });

  test('regular expression metacharacters are literal', () => {
    for (const pattern of ['a+b', 'a?b', '(a)', '[ab]', 'a|b', '^a$', 'a{2}', 'a\\b']) {
      assert.ok(globMatch(pattern, pattern), pattern);
    }
    assert.ok(!globMatch('a+', 'aa'));
    assert.ok(!globMatch('a?b', 'ab'));
    assert.ok(!globMatch('[ab]', 'a'));
    assert.ok(!globMatch('a|b', 'a'));
  });

  test('a pattern must match the whole text', () => {
    assert.ok(!globMatch('main', 'main2'));
    assert.ok(!globMatch('main', 'xmain'));
    assert.ok(!globMatch('', 'main'));
  });

  test('a pattern full of stars stays fast on a long text', () => {
    // A backtracking matcher would take exponential time here and never
    // return; this one takes about a millisecond. The bound is a deadline for
    // "it finished", ten thousand times that, not a measure of speed.
    const started = Date.now();
    assert.ok(!globMatch(`${'*a'.repeat(50)}b`, 'a'.repeat(5000)));
    assert.ok(Date.now() - started < 10_000);
  });
});

describe('refMatches', () => {
  test('a pattern matches the full ref or the short branch name', () => {
    assert.ok(refMatches('main', push('refs/heads/main')));
    assert.ok(refMatches('refs/heads/main', push('refs/heads/main')));
    assert.ok(refMatches('refs/heads/*', push('refs/heads/feature/x')));
    assert.ok(refMatches('feature/*', push('refs/heads/feature/x')));
    assert.ok(!refMatches('heads/main', push('refs/heads/main')));
    assert.ok(!refMatches('main', push('refs/heads/maintenance')));
  });

  test('a tag matches by its full ref or its short name', () => {
    assert.ok(refMatches('v1.2', tag('refs/tags/v1.2')));
    assert.ok(refMatches('v*', tag('refs/tags/v1.2')));
    assert.ok(refMatches('refs/tags/*', tag('refs/tags/v1.2')));
    assert.ok(!refMatches('refs/heads/*', tag('refs/tags/v1.2')));
    assert.ok(!refMatches('v1.2', tag('refs/tags/v1x2')));
  });

  test('a pull request matches the branch it merges into, given short or full', () => {
    for (const base of ['main', 'refs/heads/main']) {
      assert.ok(refMatches('main', pr(7, base)), base);
      assert.ok(refMatches('refs/heads/main', pr(7, base)), base);
      assert.ok(refMatches('ma*', pr(7, base)), base);
      assert.ok(!refMatches('dev', pr(7, base)), base);
    }
  });

  test('a pull request also matches by its own refs/pull/N/head ref', () => {
    assert.ok(refMatches('refs/pull/7/head', pr(7, 'main')));
    assert.ok(refMatches('refs/pull/*', pr(7, null)));
    assert.ok(!refMatches('refs/pull/8/head', pr(7, 'main')));
    assert.ok(!refMatches('main', pr(7, null)));
  });

  test('the head branch of a pull request is not what it matches', () => {
    assert.ok(!refMatches('feature', { ...pr(7, 'main'), ref: 'refs/pull/7/head' }));
  });

  test('manual runs and reruns match their ref like a push, a bare name being a branch', () => {
    assert.ok(refMatches('main', { ref: 'refs/heads/main', event: 'manual' }));
    assert.ok(refMatches('main', { ref: 'refs/heads/main', event: 'rerun' }));
    assert.ok(refMatches('refs/heads/main', { ref: 'main', event: 'manual' }));
    assert.ok(refMatches('main', { ref: 'main', event: 'manual' }));
  });
});
