// artifacts: and cache: in the pipeline file: what they compile to, their
// defaults, and errors that name the line and the field.
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { test } from 'node:test';
import { compile, issuesOf, onlyIssue, show, yaml } from '../pipeline/helpers.ts';

test("docs/artifacts.md's example compiles to the artifacts and caches it describes", () => {
  const doc = readFileSync(new URL('../../docs/artifacts.md', import.meta.url), 'utf8');
  const example = /```yaml\n([\s\S]*?)```/.exec(doc)?.[1] ?? '';
  const [build, deploy] = compile(example).tasks;
  assert.deepEqual(build?.storage, {
    artifacts: { paths: ['dist/**'], expireInS: 7 * 86_400, when: 'on_success' },
    caches: [
      {
        key: "npm-{{ hash 'package-lock.json' }}",
        restoreKeys: ['npm-'],
        paths: ['node_modules'],
        policy: 'pull-push',
      },
    ],
  });
  assert.equal(deploy?.storage, undefined, 'a task without artifacts or caches carries nothing');
  assert.deepEqual(deploy?.needs, ['build']);
});

test('defaults: artifacts kept 30 days after a success; a single cache map is a list of one, pulled and pushed', () => {
  const [task] = compile(yaml`
    version: 1
    tasks:
      t:
        script: [make]
        artifacts:
          paths: [out]
        cache:
          key: k
          paths: [.cache]
  `).tasks;
  assert.deepEqual(task?.storage, {
    artifacts: { paths: ['out'], expireInS: 30 * 86_400, when: 'on_success' },
    caches: [{ key: 'k', restoreKeys: [], paths: ['.cache'], policy: 'pull-push' }],
  });
});

test('errors name the line and the field', () => {
  const cases: Array<[string, RegExp]> = [
    [
      yaml`
        version: 1
        tasks:
          t:
            script: [make]
            artifacts:
              paths: [dist]
              expire_in: 500d
      `,
      /^7:\d+ tasks\.t\.artifacts\.expire_in: must be at most 400d, got "500d"$/,
    ],
    [
      yaml`
        version: 1
        tasks:
          t:
            script: [make]
            artifacts:
              paths: ["../secrets"]
      `,
      /^6:\d+ tasks\.t\.artifacts\.paths\[0\]: must not leave the checkout \(".."\)$/,
    ],
    [
      yaml`
        version: 1
        tasks:
          t:
            script: [make]
            artifacts:
              paths: [dist]
              when: sometimes
      `,
      /^7:\d+ tasks\.t\.artifacts\.when: must be "on_success" or "on_failure" or "always"$/,
    ],
    [
      yaml`
        version: 1
        tasks:
          t:
            script: [make]
            cache:
              key: "npm-{{ env.HOME }}"
              paths: [node_modules]
      `,
      /^6:\d+ tasks\.t\.cache\.key: the only template a cache key may hold is \{\{ hash 'file' \}\}$/,
    ],
    [
      yaml`
        version: 1
        tasks:
          t:
            script: [make]
            cache:
              key: k
              paths: [node_modules]
              policy: pushpull
      `,
      /^8:\d+ tasks\.t\.cache\.policy: must be "pull" or "push" or "pull-push"$/,
    ],
  ];
  for (const [text, expected] of cases) {
    assert.match(show(onlyIssue(text)), expected);
  }
});

test('a misspelt key under artifacts or cache is named, with what was meant', () => {
  const issues = issuesOf(yaml`
    version: 1
    tasks:
      t:
        script: [make]
        artifacts:
          path: [dist]
        cache:
          - key: k
            paths: [x]
            restore_key: [k-]
  `).map(show);
  assert.ok(
    issues.includes('6:7 tasks.t.artifacts: unknown key "path" (did you mean "paths"?)'),
    issues.join('\n'),
  );
  assert.ok(
    issues.includes(
      '10:9 tasks.t.cache[0]: unknown key "restore_key" (did you mean "restore_keys"?)',
    ),
    issues.join('\n'),
  );
});
