// The Run form's fields (issue #29 review): from the latest trusted job of the
// ref being run, never from a fork's pull request nor another branch.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { renderRunForm } from '../../lib/pages/run.ts';
import { createProject } from '../e2e/calls.ts';
import { testStack } from '../helpers/stack.ts';

const stack = await testStack(import.meta.filename);
const pool = stack.context.pool;

test("the Run form for a ref shows the fields its latest trusted job declared, never an untrusted job's nor another branch's", async () => {
  await createProject(stack, {
    id: 'rf',
    name: 'rf',
    forge: 'github',
    repo: 'acme/rf',
    repo_url: 'https://github.com/acme/rf.git',
  });
  const mainInputs = [
    {
      name: 'env',
      type: 'choice',
      description: null,
      required: false,
      default: 'staging',
      options: ['staging', 'prod'],
    },
  ];
  const forkInputs = [
    {
      name: 'token',
      type: 'string',
      description: 'Paste your production deploy token here',
      required: true,
      default: null,
      options: null,
    },
  ];
  const featureInputs = [
    {
      name: 'region',
      type: 'string',
      description: null,
      required: false,
      default: 'eu',
      options: null,
    },
  ];
  const sha = 'a'.repeat(40);
  await pool.query(
    `insert into jobs (project_id, number, state, trigger, ref, sha, trusted, started_at, declared_inputs)
     values ('rf', 1, 'running', 'push', 'refs/heads/main', $1, true, now(), $2::jsonb),
            ('rf', 2, 'running', 'pull_request', 'refs/pull/7/head', $1, false, now(), $3::jsonb),
            ('rf', 3, 'running', 'push', 'refs/heads/main', $1, false, now(), $3::jsonb),
            ('rf', 4, 'running', 'push', 'refs/heads/feature', $1, true, now(), $4::jsonb)`,
    [sha, JSON.stringify(mainInputs), JSON.stringify(forkInputs), JSON.stringify(featureInputs)],
  );
  const form = String(await renderRunForm(pool, 'rf', 'csrf'));
  assert.doesNotMatch(form, /Paste your production deploy token here/, form);
  assert.match(form, /data-input="env"/, form);
  assert.doesNotMatch(form, /data-input="region"/, form);
  // The form for another ref shows that ref's fields.
  const feature = String(await renderRunForm(pool, 'rf', 'csrf', 'feature'));
  assert.match(feature, /data-input="region"/, feature);
  assert.doesNotMatch(feature, /data-input="env"/, feature);
  assert.match(form, /id="run-ref" name="ref" value="main"/, form);
  // A repository whose webhooks said its default branch is `feature`: the
  // form offers that branch, with its fields.
  await pool.query(`update projects set default_branch = 'feature' where id = 'rf'`);
  const offered = String(await renderRunForm(pool, 'rf', 'csrf'));
  assert.match(offered, /id="run-ref" name="ref" value="feature"/, offered);
  assert.match(offered, /data-input="region"/, offered);
});
