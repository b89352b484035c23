// The house runs one way (docs/architecture.md): infra/ and local/ →
// functions/ → lib/app/ → the other lib/ folders → the lib/ primitives.
// Drawn from the imports of every .ts file (TypeScript's own pre-processor
// reads them, `import type` and `import()` included), with no cycles and
// nothing pointing back up.
import assert from 'node:assert/strict';
import { existsSync, readdirSync, readFileSync, statSync } from 'node:fs';
import { dirname, join, relative, resolve } from 'node:path';
import { test } from 'node:test';
import { fileURLToPath } from 'node:url';
import ts from 'typescript';

const ROOT = resolve(dirname(fileURLToPath(import.meta.url)), '..');

/** The root of lib/ holds only these: small modules everything may use. */
const PRIMITIVES = [
  'aws-sign',
  'config',
  'duration',
  'errors',
  'log',
  'masking',
  'secrets',
  'states',
  'version',
  'zod',
];

/**
 * What each part may import besides itself. `context` is the one root module
 * that imports folders: it builds a container's pool, keyring and idle gate,
 * and sets the forge client's address policy. `functions` may not import each
 * other (each is a Lambda of its own).
 */
const ALLOWED: Record<string, readonly string[]> = {
  infra: ['functions', 'scripts', 'app', 'http', 'idle', 'channel', 'db', 'context', 'primitives'],
  local: [
    'functions',
    'runner',
    'app',
    'pages',
    'forge',
    'http',
    'storage',
    'pickup',
    'fleet',
    'db',
    'context',
    'primitives',
  ],
  scripts: ['cli', 'local', 'runner', 'pipeline', 'db', 'primitives'],
  cli: ['local', 'app', 'pages', 'pipeline', 'primitives'],
  runner: ['pipeline', 'primitives'],
  functions: ['app', 'http', 'pages', 'context', 'primitives'],
  app: [
    'pages',
    'people',
    'scheduler',
    'schedules',
    'forge',
    'idle',
    'storage',
    'pickup',
    'channel',
    'fleet',
    'reports',
    'notify',
    'http',
    'pipeline',
    'db',
    'context',
    'primitives',
  ],
  pages: [
    'people',
    'scheduler',
    'storage',
    'reports',
    'fleet',
    'http',
    'db',
    'context',
    'primitives',
  ],
  people: ['forge', 'db', 'context', 'primitives'],
  http: ['db', 'primitives'],
  scheduler: ['pipeline', 'db', 'primitives'],
  schedules: ['db', 'primitives'],
  forge: ['pipeline', 'primitives'],
  idle: ['forge', 'db', 'primitives'],
  storage: ['db', 'primitives'],
  pickup: ['primitives'],
  channel: ['primitives'],
  fleet: ['db', 'primitives'],
  reports: ['db', 'primitives'],
  notify: ['forge', 'pipeline', 'db', 'primitives'],
  pipeline: ['primitives'],
  context: ['db', 'forge', 'idle', 'storage', 'pickup', 'fleet', 'primitives'],
  db: ['primitives'],
  primitives: [],
};
const SELF_IMPORTS = new Set(Object.keys(ALLOWED).filter((part) => part !== 'functions'));
const FOLDERS = [
  'app',
  'channel',
  'db',
  'fleet',
  'forge',
  'http',
  'idle',
  'notify',
  'pages',
  'people',
  'pickup',
  'pipeline',
  'reports',
  'scheduler',
  'schedules',
  'storage',
];
const TOP = ['cli', 'functions', 'local', 'runner', 'infra', 'scripts'];

/** The part a file belongs to, or an error message when it belongs to none. */
function partOf(file: string): string {
  const [top, second, ...rest] = relative(ROOT, file).split('/');
  if (top !== 'lib') {
    if (TOP.includes(top!)) return top!;
    throw new Error(`${relative(ROOT, file)} is outside the parts the check knows`);
  }
  if (rest.length > 0 || !second!.endsWith('.ts')) {
    if (FOLDERS.includes(second!)) return second!;
    throw new Error(`lib/${second} is not one of lib/'s folders (${FOLDERS.join(', ')})`);
  }
  const name = second!.replace(/\.ts$/, '');
  if (name === 'context') return 'context';
  if (PRIMITIVES.includes(name)) return 'primitives';
  throw new Error(
    `lib/${second} is not a primitive: the root of lib/ keeps ${PRIMITIVES.join(', ')}`,
  );
}

function sources(dir: string): string[] {
  if (!existsSync(dir)) return [];
  return readdirSync(dir).flatMap((entry) => {
    const path = join(dir, entry);
    if (entry === 'node_modules') return [];
    if (statSync(path).isDirectory()) return sources(path);
    return path.endsWith('.ts') ? [path] : [];
  });
}

interface Edge {
  from: string;
  to: string;
}

function importGraph(): { files: string[]; edges: Edge[]; unresolved: string[] } {
  const files = ['lib', ...TOP].flatMap((dir) => sources(join(ROOT, dir)));
  const edges: Edge[] = [];
  const unresolved: string[] = [];
  for (const from of files) {
    const info = ts.preProcessFile(readFileSync(from, 'utf8'), true, true);
    for (const { fileName } of info.importedFiles) {
      if (!fileName.startsWith('.')) continue;
      const to = resolve(dirname(from), fileName);
      if (!existsSync(to)) unresolved.push(`${relative(ROOT, from)} → ${fileName}`);
      else if (to.startsWith(`${ROOT}/lib/`) || TOP.some((t) => to.startsWith(`${ROOT}/${t}/`))) {
        edges.push({ from, to });
      }
    }
  }
  return { files, edges, unresolved };
}

const graph = importGraph();
const rel = (file: string) => relative(ROOT, file);

test('every relative import names a file that exists', () => {
  assert.deepEqual(graph.unresolved, []);
});

test('every file of lib/ belongs to a primitive or a known folder, and every import follows the layers', () => {
  const wrong: string[] = [];
  for (const file of graph.files) {
    try {
      partOf(file);
    } catch (err) {
      wrong.push((err as Error).message);
    }
  }
  for (const { from, to } of graph.edges) {
    let a: string;
    let b: string;
    try {
      a = partOf(from);
      b = partOf(to);
    } catch {
      continue; // reported above
    }
    const ok = a === b ? SELF_IMPORTS.has(a) : ALLOWED[a]!.includes(b);
    if (!ok) wrong.push(`${rel(from)} (${a}) imports ${rel(to)} (${b})`);
  }
  assert.deepEqual(wrong, []);
});

test('nothing in lib/ imports functions/, local/, runner/, infra/ or scripts/', () => {
  const up = graph.edges
    .filter(({ from, to }) => rel(from).startsWith('lib/') && !rel(to).startsWith('lib/'))
    .map(({ from, to }) => `${rel(from)} → ${rel(to)}`);
  assert.deepEqual(up, []);
});

test('the import graph of lib/ and functions/ has no cycles', () => {
  // Tarjan's strongly connected components: a component of two or more
  // files, or a file that imports itself, is a cycle.
  const inScope = (f: string) => /^(lib|functions)\//.test(rel(f));
  const next = new Map<string, string[]>();
  for (const { from, to } of graph.edges) {
    if (inScope(from) && inScope(to)) next.set(from, [...(next.get(from) ?? []), to]);
  }
  let index = 0;
  const indexOf = new Map<string, number>();
  const low = new Map<string, number>();
  const stack: string[] = [];
  const onStack = new Set<string>();
  const cycles: string[][] = [];
  const visit = (v: string) => {
    indexOf.set(v, index);
    low.set(v, index++);
    stack.push(v);
    onStack.add(v);
    for (const w of next.get(v) ?? []) {
      if (!indexOf.has(w)) {
        visit(w);
        low.set(v, Math.min(low.get(v)!, low.get(w)!));
      } else if (onStack.has(w)) low.set(v, Math.min(low.get(v)!, indexOf.get(w)!));
    }
    if (low.get(v) === indexOf.get(v)) {
      const component: string[] = [];
      let w: string;
      do {
        w = stack.pop()!;
        onStack.delete(w);
        component.push(rel(w));
      } while (w !== v);
      if (component.length > 1 || next.get(v)?.includes(v)) cycles.push(component.sort());
    }
  };
  for (const file of graph.files.filter(inScope)) if (!indexOf.has(file)) visit(file);
  assert.deepEqual(cycles, []);
});

test('the check reads the layout it guards', () => {
  // A check that found no files or no imports would pass whatever the layout.
  const parts = new Set(graph.files.map((f) => partOf(f)));
  for (const part of ['functions', 'app', 'scheduler', 'forge', 'http', 'primitives']) {
    assert.ok(parts.has(part), `no file of ${part}`);
  }
  assert.ok(
    graph.edges.some(({ from, to }) => partOf(from) === 'functions' && partOf(to) === 'app'),
    'functions/ import lib/app/',
  );
});

// Issue #55: the rest of the code asks the project's forge (lib/forge/<name>/,
// through lib/forge/registry.ts) and never names one: a branch on a forge's
// name outside lib/forge/ is a forge module's job done in the wrong place.
const FORGE_NAME = String.raw`['"\x60](?:github|gitea|gitlab|forgejo)['"\x60]`;
const FORGE_BRANCHES = [
  // `forge === 'gitea'`, `project.forge !== 'github'`, `f == "gitlab"`
  new RegExp(String.raw`\b(?:forge|f|kind)\s*[!=]==?\s*${FORGE_NAME}`),
  // `'github' === forge`, and any comparison with a forge's name
  new RegExp(String.raw`${FORGE_NAME}\s*[!=]==?`),
  new RegExp(String.raw`[!=]==?\s*${FORGE_NAME}`),
  // `case 'gitea':`
  new RegExp(String.raw`\bcase\s+${FORGE_NAME}\s*:`),
  // `switch (project.forge)`
  /\bswitch\s*\([^)]*\bforge\b[^)]*\)/,
];

/** The lines of `text` that branch on a forge's name, comments left out. */
function forgeBranches(text: string): string[] {
  return text
    .split('\n')
    .map((line) => line.replace(/^\s*(\/\/|\*|\/\*).*$/, ''))
    .filter((line) => FORGE_BRANCHES.some((re) => re.test(line)));
}

test('nothing outside lib/forge/ branches on a forge by its name', () => {
  const found: string[] = [];
  for (const file of graph.files) {
    if (rel(file).startsWith('lib/forge/')) continue;
    for (const line of forgeBranches(readFileSync(file, 'utf8'))) {
      found.push(`${rel(file)}: ${line.trim()}`);
    }
  }
  assert.deepEqual(found, []);
});

test('the forge-name check finds each kind of branch it forbids, and not a forge named in a value', () => {
  for (const line of [
    "if (project.forge === 'gitea') {",
    "  if (forge !== 'github') parts.push(x);",
    "const name = who.person.forge === 'github' ? 'GitHub' : 'Gitea';",
    "f === 'gitlab' ? a : b",
    "if ('gitlab' === kind) return;",
    "  case 'gitea':",
    'switch (project.forge) {',
  ]) {
    assert.equal(forgeBranches(line).length, 1, line);
  }
  for (const line of [
    "forge: 'github',",
    "export const FORGES = ['github', 'gitea', 'gitlab'] as const;",
    "// forge === 'gitea' in a comment",
    'if (forge !== DEFAULT_FORGE) parts.push(x);',
  ]) {
    assert.deepEqual(forgeBranches(line), [], line);
  }
  // The files it reads hold lib/forge/'s own branches, which it leaves alone.
  assert.ok(graph.files.some((f) => rel(f).startsWith('lib/forge/github/')));
});
