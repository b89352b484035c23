// The docs' tables of settings and commands, held to the code they describe
// (#33: docs/deploy.md gave minCapacity 0.5, proxy true and nat gateway long
// after the code had changed, and left four settings out). Every value is
// read from the code at test time: the settings from infra/context.ts and
// infra/defaults.ts, the environment from lib/config.ts, the commands from
// `ctl --help`, the outputs from a synthesised stack.
import assert from 'node:assert/strict';
import { readdirSync, readFileSync } from 'node:fs';
import { describe, test } from 'node:test';
import { USAGE } from '../cli/ctl.ts';
import { ContextSchema } from '../infra/context.ts';
import { SETTING_DEFAULTS } from '../infra/defaults.ts';
import { ConfigSchema } from '../lib/config.ts';
import * as z from '../lib/zod.ts';
import { stubBundles, synth } from './infra/support.ts';

const ROOT = new URL('..', import.meta.url);
const read = (path: string) => readFileSync(new URL(path, ROOT), 'utf8');

interface Row {
  /** Every `name` in the first cell (a row may document several). */
  names: string[];
  /** The default cell's value when it is a code literal (`45`), else undefined (prose: none, unset…). */
  literal: string | undefined;
  line: number;
}

/** The rows of the markdown table whose header row is `header`. */
function tableRows(markdown: string, header: RegExp): Row[] {
  const lines = markdown.split('\n');
  const start = lines.findIndex((l) => header.test(l));
  assert.ok(start >= 0, `no table with a header like ${header}`);
  const rows: Row[] = [];
  for (let i = start + 2; i < lines.length && lines[i]!.startsWith('|'); i++) {
    const [first = '', second = ''] = lines[i]!.split(/(?<!\\)\|/).slice(1);
    const code = /^\s*`([^`]*)`/.exec(second);
    rows.push({
      names: [...first.matchAll(/`([^`]+)`/g)].map((m) => m[1]!),
      literal: code ? code[1] : undefined,
      line: i + 1,
    });
  }
  return rows;
}

/** Each key's default as the schema's input would take it (`'true'`, not `true`). */
function schemaDefaults(schema: z.ZodMiniObject): Record<string, unknown> {
  const json = z.toJSONSchema(schema, { io: 'input', unrepresentable: 'any' }) as {
    properties: Record<string, { default?: unknown }>;
  };
  return Object.fromEntries(
    Object.entries(json.properties)
      .filter(([, p]) => p.default !== undefined)
      .map(([k, p]) => [k, p.default]),
  );
}

/**
 * What disagrees between a table and the code: a name the code reads and the
 * table leaves out, a name the table has and the code does not read, a
 * default the table states differently (or states where the code has none).
 */
function disagreements(
  file: string,
  rows: Row[],
  names: readonly string[],
  defaults: Record<string, unknown>,
): string[] {
  const problems: string[] = [];
  const documented = new Map(rows.flatMap((r) => r.names.map((n) => [n, r] as const)));
  for (const name of names) {
    if (!documented.has(name))
      problems.push(`${file}: ${name} is read by the code but not documented`);
  }
  for (const [name, row] of documented) {
    if (!names.includes(name)) {
      problems.push(`${file}:${row.line}: ${name} is documented but the code does not read it`);
      continue;
    }
    const code = defaults[name];
    if (code === undefined) {
      if (row.literal !== undefined) {
        problems.push(
          `${file}:${row.line}: ${name} has no default in the code, the docs say \`${row.literal}\``,
        );
      }
    } else if (row.literal !== String(code)) {
      problems.push(
        `${file}:${row.line}: ${name} defaults to \`${String(code)}\` in the code, the docs say ${row.literal === undefined ? 'no value' : `\`${row.literal}\``}`,
      );
    }
  }
  return problems;
}

/** The commands `ctl --help` lists, each with how many positional arguments it takes. */
function usageCommands(usage: string): { words: string[]; positionals: number }[] {
  const commands: { words: string[]; positionals: number }[] = [];
  for (const line of usage.split('\n')) {
    // A command starts two spaces in; its description follows a wider gap.
    const m = /^ {2}([a-z][^\s].*)$/.exec(line);
    if (!m) continue;
    const tokens = m[1]!.split(/\s{2,}/)[0]!.split(/\s+/);
    const words: string[] = [];
    while (tokens.length && /^[a-z][a-z-]*$/.test(tokens[0]!)) words.push(tokens.shift()!);
    let positionals = 0;
    for (const t of tokens) {
      if (t.startsWith('-') || t.startsWith('[-')) break;
      positionals++;
    }
    commands.push({ words, positionals });
  }
  return commands;
}

/** Every `npm run ctl -- …` in a markdown text: the command words and the positional arguments. */
function documentedCtlCalls(
  markdown: string,
): { text: string; words: string[]; positionals: number }[] {
  const calls: { text: string; words: string[]; positionals: number }[] = [];
  for (const m of markdown.matchAll(/npm run ctl -- ([^`\n#|;&>]*)/g)) {
    const tokens = m[1]!.trim().split(/\s+/).filter(Boolean);
    // The global options come first: --url URL, --token TOKEN; --help is its own answer.
    while (tokens[0] === '--url' || tokens[0] === '--token') tokens.splice(0, 2);
    if (tokens.length === 0 || tokens[0] === '--help' || tokens[0] === '-h') continue;
    const words: string[] = [];
    while (tokens.length && /^[a-z][a-z-]*$/.test(tokens[0]!)) words.push(tokens.shift()!);
    let positionals = 0;
    for (const t of tokens) {
      if (t.startsWith('-') || t === '…' || t === '...') break;
      positionals++;
    }
    calls.push({ text: m[0].trim(), words, positionals });
  }
  return calls;
}

/** The calls that name no command of `usage` (or give it more positional arguments than it takes). */
function unknownCalls(markdown: string, usage: string): string[] {
  const commands = usageCommands(usage);
  return documentedCtlCalls(markdown)
    .filter(({ words, positionals }) => {
      // `job watch JOB` is not `job JOB_ID`: the words past a command count as its arguments.
      return !commands.some(
        (c) =>
          c.words.length <= words.length &&
          c.words.every((w, i) => w === words[i]) &&
          words.length - c.words.length + positionals <= c.positionals,
      );
    })
    .map((c) => c.text);
}

/** The options (`--name`) of the `npm run ctl -- …` calls in a text that `usage` never mentions. */
function unknownFlags(markdown: string, usage: string): string[] {
  const known = new Set([...usage.matchAll(/--[a-z][a-z-]*/g)].map((m) => m[0]));
  return documentedCtlCalls(markdown).flatMap(({ text }) =>
    [...text.matchAll(/(?<![\w-])--[a-z][a-z-]*/g)]
      .map((m) => m[0])
      .filter((flag) => flag !== '--' && !known.has(flag))
      .map((flag) => `${text}: ${flag}`),
  );
}

const deployMd = read('docs/deploy.md');
const readme = read('README.md');

describe('docs/deploy.md', () => {
  test('its settings table lists every setting infra/context.ts reads, with the default the stack gives it, and no other', () => {
    const rows = tableRows(deployMd, /^\| context \| default \| meaning \|/);
    const defaults = { ...SETTING_DEFAULTS, ...schemaDefaults(ContextSchema) };
    assert.deepEqual(
      disagreements('docs/deploy.md', rows, Object.keys(ContextSchema.shape), defaults),
      [],
    );
  });

  test('every -c setting in an example command is one the stack reads', () => {
    const known = Object.keys(ContextSchema.shape);
    for (const file of ['docs/deploy.md', 'README.md', 'infra/README.md']) {
      // `-c name=value` itself is the syntax, not a setting.
      const used = [...read(file).matchAll(/-c '?([A-Za-z]+)=/g)]
        .map((m) => m[1]!)
        .filter((name) => name !== 'name');
      assert.ok(file !== 'docs/deploy.md' || used.length > 0, 'deploy.md has no example');
      assert.deepEqual(
        used.filter((name) => !known.includes(name)),
        [],
        file,
      );
    }
  });

  test('its outputs table lists every output of the stack, and no other', () => {
    const outputs = Object.keys(
      (synth(stubBundles()).template.toJSON() as { Outputs: Record<string, unknown> }).Outputs,
    ).sort();
    const documented = tableRows(deployMd, /^\| output \| what \|/)
      .flatMap((r) => r.names)
      .sort();
    assert.deepEqual(documented, outputs);
  });
});

describe("README's configuration table", () => {
  test('lists every variable of lib/config.ts with its default, and no other', () => {
    const rows = tableRows(readme, /^\| variable \| default \| meaning \|/);
    assert.deepEqual(
      disagreements(
        'README.md',
        rows,
        Object.keys(ConfigSchema.shape),
        schemaDefaults(ConfigSchema),
      ),
      [],
    );
  });
});

describe('ctl commands in the docs', () => {
  test('every `npm run ctl -- …` in README and docs/ is a command `ctl --help` lists', () => {
    const files = [
      'README.md',
      ...readdirSync(new URL('docs/', ROOT))
        .filter((f) => f.endsWith('.md'))
        .map((f) => `docs/${f}`),
    ];
    const calls = files.flatMap((f) => documentedCtlCalls(read(f)));
    // The README walks through the CLI; finding none means the parser broke.
    assert.ok(documentedCtlCalls(readme).length >= 5, 'found no ctl calls in README.md');
    assert.ok(calls.length > 0);
    const unknown = files.flatMap((f) => unknownCalls(read(f), USAGE).map((c) => `${f}: ${c}`));
    assert.deepEqual(unknown, []);
  });

  test('every option such a call gives is one `ctl --help` lists', () => {
    const files = [
      'README.md',
      ...readdirSync(new URL('docs/', ROOT))
        .filter((f) => f.endsWith('.md'))
        .map((f) => `docs/${f}`),
    ];
    const unknown = files.flatMap((f) => unknownFlags(read(f), USAGE).map((c) => `${f}: ${c}`));
    assert.deepEqual(unknown, []);
  });
});

describe('the checks themselves', () => {
  // Each check on a table that disagrees, so that none of them passes by
  // reading nothing.
  test('a wrong default, a missing setting and an unknown one are each reported', () => {
    const rows = tableRows(
      [
        '| context | default | meaning |',
        '|---|---|---|',
        '| `a` | `1` | x |',
        '| `c` | none | x |',
        '| `d` | `5` | x |',
      ].join('\n'),
      /^\| context \|/,
    );
    assert.deepEqual(disagreements('t.md', rows, ['a', 'b', 'd'], { a: 2 }), [
      't.md: b is read by the code but not documented',
      't.md:3: a defaults to `2` in the code, the docs say `1`',
      't.md:4: c is documented but the code does not read it',
      't.md:5: d has no default in the code, the docs say `5`',
    ]);
  });

  test('a ctl call that is not a command, or takes too many arguments, is reported', () => {
    const usage =
      'usage: ctl <command>\n\n  jobs --project ID          list\n  job JOB_ID                show\n  job approve JOB_ID        approve\n';
    const md = [
      '`npm run ctl -- jobs --project mine`',
      '`npm run ctl -- job <JOB_ID>`',
      '`npm run ctl -- job approve JOB_ID`',
      '`npm run ctl -- --url "$API" joblist --project mine`',
      '`npm run ctl -- job watch JOB_ID`',
    ].join('\n');
    assert.deepEqual(unknownCalls(md, usage), [
      'npm run ctl -- --url "$API" joblist --project mine',
      'npm run ctl -- job watch JOB_ID',
    ]);
  });

  test('an option that ctl --help does not list is reported', () => {
    const usage =
      'usage: ctl <command>\n\n  secret set --project ID --name NAME [--file PATH]   set\n';
    const md = [
      '`npm run ctl -- secret set --project mine --name A --file ./a`',
      '`npm run ctl -- secret set --project mine --name A --value hunter2`',
    ].join('\n');
    assert.deepEqual(unknownFlags(md, usage), [
      'npm run ctl -- secret set --project mine --name A --value hunter2: --value',
    ]);
  });
});
