// Commit statuses link to the job pages only when the function posting them
// knows CONDUCTOR_PUBLIC_URL (lib/app/statuses.ts); a deployed stack used to
// set it nowhere, so statuses carried no link (#33).
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { FUNCTION_NAMES, STATUS_POSTERS } from '../../infra/stack.ts';
import { logicalId, type Synthesised, stubBundles, synth, type TemplateJson } from './support.ts';

const bundles = stubBundles();
const byDefault = synth(bundles);
const custom = synth(bundles, { publicUrl: 'https://ci.example' });
const withProxy = synth(bundles, { proxy: true, minCapacity: 0.5 });

const envOf = ({ stack, json }: Synthesised, name: (typeof FUNCTION_NAMES)[number]) =>
  (
    json.Resources[logicalId(stack, stack.functions[name])]!.Properties.Environment as {
      Variables: Record<string, unknown>;
    }
  ).Variables;

const outputsOf = (s: Synthesised) =>
  (s.template.toJSON() as { Outputs: Record<string, { Value: unknown }> }).Outputs;

const apiEndpoint = (stack: Synthesised['stack']) => ({
  'Fn::GetAtt': [logicalId(stack, stack.httpApi), 'ApiEndpoint'],
});

/** Every logical id a value refers to (Ref, Fn::GetAtt, Fn::Sub's ${...}). */
function referencesIn(value: unknown, into = new Set<string>()): Set<string> {
  if (Array.isArray(value)) {
    for (const v of value) referencesIn(v, into);
  } else if (value && typeof value === 'object') {
    for (const [key, v] of Object.entries(value)) {
      if (key === 'Ref' && typeof v === 'string') into.add(v);
      else if (key === 'Fn::GetAtt')
        into.add(Array.isArray(v) ? String(v[0]) : String(v).split('.')[0]!);
      else if (key === 'Fn::Sub') {
        const text = Array.isArray(v) ? String(v[0]) : String(v);
        for (const m of text.matchAll(/\$\{([^}.!]+)/g)) into.add(m[1]!);
        referencesIn(v, into);
      } else referencesIn(v, into);
    }
  }
  return into;
}

/** A dependency cycle among the template's resources, as CloudFormation would refuse it; none: []. */
function findCycle(json: TemplateJson): string[] {
  const ids = new Set(Object.keys(json.Resources));
  const edges = new Map<string, string[]>();
  for (const [id, resource] of Object.entries(json.Resources)) {
    const refs = referencesIn(resource.Properties ?? {});
    for (const d of resource.DependsOn ?? []) refs.add(d);
    edges.set(
      id,
      [...refs].filter((r) => ids.has(r)),
    );
  }
  const state = new Map<string, 'open' | 'done'>();
  const path: string[] = [];
  const visit = (id: string): string[] => {
    if (state.get(id) === 'done') return [];
    if (state.get(id) === 'open') return [...path.slice(path.indexOf(id)), id];
    state.set(id, 'open');
    path.push(id);
    for (const next of edges.get(id) ?? []) {
      const cycle = visit(next);
      if (cycle.length) return cycle;
    }
    path.pop();
    state.set(id, 'done');
    return [];
  };
  for (const id of ids) {
    const cycle = visit(id);
    if (cycle.length) return cycle;
  }
  return [];
}

describe('CONDUCTOR_PUBLIC_URL', () => {
  test("by default, every function that posts statuses is told the HTTP API's own URL, and no other", () => {
    const expected = apiEndpoint(byDefault.stack);
    for (const name of FUNCTION_NAMES) {
      const posts = (STATUS_POSTERS as readonly string[]).includes(name);
      assert.deepEqual(
        envOf(byDefault, name).CONDUCTOR_PUBLIC_URL,
        posts ? expected : undefined,
        name,
      );
    }
    // The same value as the ApiUrl output: the URL the runners and forges use.
    assert.deepEqual(outputsOf(byDefault).ApiUrl!.Value, expected);
    assert.deepEqual(outputsOf(byDefault).PublicUrl!.Value, expected);
  });

  test('-c publicUrl sets it for every function that posts statuses, and the PublicUrl output', () => {
    for (const name of STATUS_POSTERS) {
      assert.equal(envOf(custom, name).CONDUCTOR_PUBLIC_URL, 'https://ci.example', name);
    }
    assert.equal(outputsOf(custom).PublicUrl!.Value, 'https://ci.example');
    // The API keeps its own URL: runners and webhooks may go on using it.
    assert.deepEqual(outputsOf(custom).ApiUrl!.Value, apiEndpoint(custom.stack));
  });

  test('the functions that use the API URL and the API that invokes them form no dependency cycle', () => {
    for (const [shape, s] of Object.entries({ byDefault, custom, withProxy })) {
      assert.deepEqual(findCycle(s.json), [], shape);
    }
    // The function does depend on the API (it reads its endpoint), and the
    // API's integrations on the function: both directions exist, without a loop.
    const fn = logicalId(byDefault.stack, byDefault.stack.functions.api);
    const api = logicalId(byDefault.stack, byDefault.stack.httpApi);
    assert.ok(referencesIn(byDefault.json.Resources[fn]!.Properties).has(api));
  });

  test('the cycle check finds a cycle when there is one', () => {
    const json: TemplateJson = {
      Resources: {
        Api: {
          Type: 'AWS::ApiGatewayV2::Api',
          Properties: { Target: { 'Fn::GetAtt': ['Fn', 'Arn'] } },
        },
        Fn: {
          Type: 'AWS::Lambda::Function',
          Properties: {
            Environment: { Variables: { URL: { 'Fn::GetAtt': ['Api', 'ApiEndpoint'] } } },
          },
        },
        Other: { Type: 'AWS::SQS::Queue', Properties: {}, DependsOn: ['Fn'] },
      },
    };
    assert.deepEqual(findCycle(json), ['Api', 'Fn', 'Api']);
    delete json.Resources.Api!.Properties.Target;
    assert.deepEqual(findCycle(json), []);
  });
});
