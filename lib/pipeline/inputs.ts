// `inputs:`: what a manual or scheduled run may be given (docs/pipeline.md,
// "`inputs`"). The declarations are checked with the rest of the file; the
// values a job was given are checked against them when it compiles, and reach
// every task as CONDUCTOR_INPUT_<NAME> and wherever `${{ inputs.<name> }}`
// is written in a script line, an env value, an image or a block's prompt.
import { parse as parseYaml } from 'yaml';
import * as z from '../zod.ts';
import type { Trigger } from './glob.ts';
import type { IssueList, PathSegment } from './issues.ts';
import { describeValue, quote } from './messages.ts';
import { envFragment, VAR_NAME_PATTERN } from './names.ts';
import { type Loc, locate } from './source.ts';

export const INPUT_TYPES = ['string', 'number', 'boolean', 'choice'] as const;
export type InputType = (typeof INPUT_TYPES)[number];

/** Most inputs one pipeline may declare. */
export const MAX_INPUTS = 50;
/** Longest value an input may be given, in characters. */
export const MAX_INPUT_CHARS = 4096;

const Scalar = z.union([z.string(), z.number(), z.boolean()]);

const InputSchema = z
  .strictObject({
    type: z.enum(INPUT_TYPES, {
      error: (issue) =>
        issue.input === undefined
          ? undefined
          : `must be ${INPUT_TYPES.join(', ')}, got ${describeValue(issue.input)}`,
    }),
    description: z.optional(z.string().check(z.maxLength(500))),
    required: z.optional(z.boolean()),
    default: z.optional(Scalar),
    options: z.optional(
      z.array(Scalar).check(z.minLength(1, 'must list at least one option'), z.maxLength(100)),
    ),
  })
  .check(
    z.superRefine((input, ctx) => {
      if (input.type === 'choice' && input.options === undefined) {
        ctx.addIssue({ code: 'custom', path: [], message: 'a choice input needs options' });
      }
      if (input.type !== 'choice' && input.options !== undefined) {
        ctx.addIssue({
          code: 'custom',
          path: ['options'],
          message: 'only a choice input has options',
        });
      }
      if (input.default !== undefined) {
        const checked = coerceInput(input as InputDeclaration, input.default);
        if ('error' in checked) {
          ctx.addIssue({ code: 'custom', path: ['default'], message: checked.error });
        }
      }
    }),
  );

/** `inputs:` as written: name → declaration. */
export const InputsSchema = z
  .record(
    z.string().check(
      z.regex(VAR_NAME_PATTERN, {
        error: (issue) =>
          `${quote(String(issue.input))} is not a valid input name (letters, digits and _, not starting with a digit)`,
      }),
    ),
    InputSchema,
  )
  .check(
    z.superRefine((inputs, ctx) => {
      const names = Object.keys(inputs);
      if (names.length > MAX_INPUTS) {
        ctx.addIssue({ code: 'custom', message: `must declare at most ${MAX_INPUTS} inputs` });
      }
      // Each reaches the script as CONDUCTOR_INPUT_<NAME>: two that mangle alike would clash.
      const byFragment = new Map<string, string>();
      for (const name of names) {
        const fragment = envFragment(name);
        const earlier = byFragment.get(fragment);
        if (earlier !== undefined) {
          ctx.addIssue({
            code: 'custom',
            path: [name],
            message: `inputs ${quote(earlier)} and ${quote(name)} would both be passed on as CONDUCTOR_INPUT_${fragment}`,
          });
        } else if (fragment === '') {
          ctx.addIssue({
            code: 'custom',
            path: [name],
            message: `input name ${quote(name)} needs a letter or digit`,
          });
        } else {
          byFragment.set(fragment, name);
        }
      }
    }),
  );

export interface InputDeclaration {
  type: InputType;
  description?: string;
  required?: boolean;
  default?: string | number | boolean;
  options?: Array<string | number | boolean>;
}

/** A declared input as the Run form and the API show it. */
export interface CompiledInput {
  name: string;
  type: InputType;
  description: string | null;
  required: boolean;
  /** The default as a string, or null. */
  default: string | null;
  options: string[] | null;
}

/** The declarations in file order, for the Run form. */
export function compileDeclarations(
  inputs: Record<string, InputDeclaration> | undefined,
): CompiledInput[] {
  return Object.entries(inputs ?? {}).map(([name, d]) => ({
    name,
    type: d.type,
    description: d.description ?? null,
    required: d.required ?? false,
    default: d.default === undefined ? null : String(d.default),
    options: d.options ? d.options.map(String) : null,
  }));
}

function expected(decl: InputDeclaration): string {
  switch (decl.type) {
    case 'string':
      return 'a string';
    case 'number':
      return 'a number';
    case 'boolean':
      return 'true or false';
    case 'choice':
      return `one of ${(decl.options ?? []).map((o) => quote(String(o))).join(', ')}`;
  }
}

/**
 * A value given for an input as the string the script sees, or what was
 * expected. Strings from a form or the command line are read as numbers and
 * booleans where the input says so (`"3"`, `"true"`).
 */
export function coerceInput(
  decl: InputDeclaration,
  value: unknown,
): { value: string } | { error: string } {
  const wrong = { error: `expected ${expected(decl)}, got ${describeValue(value)}` };
  if (typeof value === 'string' && value.length > MAX_INPUT_CHARS) {
    return { error: `must be at most ${MAX_INPUT_CHARS} characters, got ${value.length}` };
  }
  switch (decl.type) {
    case 'string':
      return typeof value === 'string' ? { value } : wrong;
    case 'number':
      if (typeof value === 'number' && Number.isFinite(value)) return { value: String(value) };
      if (typeof value === 'string' && /^-?[0-9]+(\.[0-9]+)?$/.test(value.trim())) {
        return { value: value.trim() };
      }
      return wrong;
    case 'boolean':
      if (typeof value === 'boolean') return { value: String(value) };
      if (value === 'true' || value === 'false') return { value };
      return wrong;
    case 'choice': {
      if (typeof value !== 'string' && typeof value !== 'number' && typeof value !== 'boolean') {
        return wrong;
      }
      const text = String(value);
      return (decl.options ?? []).some((o) => String(o) === text) ? { value: text } : wrong;
    }
  }
}

/** Only these triggers are given inputs; every other job takes the defaults. */
const GIVEN_BY: ReadonlySet<Trigger['event']> = new Set(['manual', 'schedule']);

/**
 * The value of each input for a job: what it was given, checked against the
 * declaration, else the default. A given input the pipeline does not declare,
 * a value of the wrong kind, and (for a manual or scheduled job) a required
 * input not given are issues naming the input and what was expected. An
 * input without a value is left out (its variable unset, its expression
 * empty). Answers name → value.
 */
export function resolveInputs(
  declared: Record<string, InputDeclaration> | undefined,
  trigger: Trigger,
  root: Loc,
  issues: IssueList,
): Map<string, string> {
  const given = GIVEN_BY.has(trigger.event) ? (trigger.inputs ?? {}) : {};
  const { values, problems } = checkInputs(declared, given, GIVEN_BY.has(trigger.event));
  for (const problem of problems) {
    const at: PathSegment[] = problem.kind === 'undeclared' ? ['inputs'] : ['inputs', problem.name];
    const message =
      problem.kind === 'undeclared'
        ? `input ${quote(problem.name)} was given (${describeValue(given[problem.name])}) but is not declared; ${problem.detail}`
        : problem.kind === 'invalid'
          ? `input ${quote(problem.name)}: ${problem.detail}`
          : `input ${quote(problem.name)} ${problem.detail}`;
    issues.add(locate(root, at, 'key'), at, message);
  }
  return values;
}

/** What is wrong with one input a run was given (or was not given). */
export interface InputProblem {
  name: string;
  /** Given but not declared; given with a value of the wrong kind; required and not given. */
  kind: 'undeclared' | 'invalid' | 'missing';
  /** What was expected: `the pipeline declares "env"`, `expected a number, got "x"`, `is required (a number) and was not given`. */
  detail: string;
}

/**
 * The values `given` makes of the declared inputs (else their defaults), and
 * what is wrong with them: an input given that is not declared, a value of
 * the wrong kind, and (with `requireRequired`) a required input not given.
 * The compile (resolveInputs) and a manual run's request (lib/app/jobs.ts)
 * both ask it.
 */
export function checkInputs(
  declared: Record<string, InputDeclaration> | undefined,
  given: Record<string, unknown>,
  requireRequired: boolean,
): { values: Map<string, string>; problems: InputProblem[] } {
  const values = new Map<string, string>();
  const problems: InputProblem[] = [];
  const decls = declared ?? {};
  const names = Object.keys(decls);
  for (const name of Object.keys(given)) {
    if (Object.hasOwn(decls, name)) continue;
    const known =
      names.length === 0
        ? 'the pipeline declares no inputs'
        : `the pipeline declares ${names.map((n) => quote(n)).join(', ')}`;
    problems.push({ name, kind: 'undeclared', detail: known });
  }
  for (const name of names) {
    const decl = decls[name]!;
    if (Object.hasOwn(given, name)) {
      const checked = coerceInput(decl, given[name]);
      if ('error' in checked) problems.push({ name, kind: 'invalid', detail: checked.error });
      else values.set(name, checked.value);
    } else if (decl.default !== undefined) {
      values.set(name, String(decl.default));
    } else if (decl.required && requireRequired) {
      problems.push({
        name,
        kind: 'missing',
        detail: `is required (${expected(decl)}) and was not given`,
      });
    }
  }
  return { values, problems };
}

/**
 * The inputs `text` (a pipeline file) declares, read without compiling it,
 * or null when they cannot be told: broken YAML, or an `inputs:` that is not
 * what the compile takes (the compile reports either). Included files hold
 * tasks only, so the file's own `inputs:` are all there are.
 */
export function declaredInputsOf(text: string): Record<string, InputDeclaration> | null {
  let value: unknown;
  try {
    // The file is bounded (MAX_PIPELINE_BYTES) by whoever read it; aliases are too.
    value = parseYaml(text, { maxAliasCount: 100, uniqueKeys: true });
  } catch {
    return null;
  }
  if (value === null || typeof value !== 'object' || Array.isArray(value)) return null;
  const inputs = (value as Record<string, unknown>).inputs;
  if (inputs === undefined || inputs === null) return {};
  const parsed = InputsSchema.safeParse(inputs);
  return parsed.success ? (parsed.data as Record<string, InputDeclaration>) : null;
}

const EXPRESSION = /\$\{\{\s*inputs\.([A-Za-z_][A-Za-z0-9_]*)\s*\}\}/g;

/**
 * `${{ inputs.<name> }}` in `text` replaced by the input's value ('' when it
 * has none); names the pipeline does not declare are collected in `unknown`.
 */
export function expandInputs(
  text: string,
  values: ReadonlyMap<string, string>,
  declared: ReadonlySet<string>,
  unknown: Set<string>,
): string {
  if (!text.includes('${{')) return text;
  return text.replace(EXPRESSION, (_, name: string) => {
    if (!declared.has(name)) unknown.add(name);
    return values.get(name) ?? '';
  });
}

interface TaskWithInputs {
  baseName: string;
  image: string | null;
  script: string[];
  env: Record<string, string>;
  block?: { prompt: string } | null;
}

/** Most characters of a block step's prompt (lib/pipeline/schema.ts checks it as written). */
const MAX_PROMPT_CHARS = 200;

// A prompt after its inputs were put in: still one line of at most 200
// characters, as the page and the commit status show it.
function onePromptLine(text: string): string {
  const line = text.replace(/\p{Cc}+/gu, ' ');
  return line.length <= MAX_PROMPT_CHARS ? line : `${line.slice(0, MAX_PROMPT_CHARS - 1)}…`;
}

/**
 * Sets each task's CONDUCTOR_INPUT_<NAME> variables and expands
 * `${{ inputs.<name> }}` in its script, env values, image and a block step's
 * prompt (kept one line of at most 200 characters); an expression
 * naming an undeclared input is an issue at the line that holds it.
 */
export function applyInputs(
  tasks: TaskWithInputs[],
  declared: Record<string, InputDeclaration> | undefined,
  values: ReadonlyMap<string, string>,
  root: Loc,
  issues: IssueList,
): void {
  const names = new Set(Object.keys(declared ?? {}));
  const reported = new Set<string>();
  const report = (path: PathSegment[], unknown: Set<string>) => {
    for (const name of unknown) {
      const key = `${path.join('.')}:${name}`;
      if (reported.has(key)) continue;
      reported.add(key);
      const known =
        names.size === 0
          ? 'the pipeline declares no inputs'
          : `declared: ${[...names].map((n) => quote(n)).join(', ')}`;
      issues.add(
        locate(root, path, 'value'),
        path,
        `\${{ inputs.${name} }} names an input that is not declared (${known})`,
      );
    }
  };
  for (const task of tasks) {
    const base = ['tasks', task.baseName];
    task.script = task.script.map((line, i) => {
      const unknown = new Set<string>();
      const out = expandInputs(line, values, names, unknown);
      report([...base, 'script', i], unknown);
      return out;
    });
    for (const [key, value] of Object.entries(task.env)) {
      const unknown = new Set<string>();
      task.env[key] = expandInputs(value, values, names, unknown);
      report([...base, 'env', key], unknown);
    }
    if (task.image !== null) {
      const unknown = new Set<string>();
      task.image = expandInputs(task.image, values, names, unknown);
      report([...base, 'image'], unknown);
    }
    if (task.block) {
      // A new object: a matrix's expansions share the one the compiler made.
      const unknown = new Set<string>();
      const prompt = expandInputs(task.block.prompt, values, names, unknown);
      report([...base, 'block', 'prompt'], unknown);
      if (prompt !== task.block.prompt)
        task.block = { ...task.block, prompt: onePromptLine(prompt) };
    }
    for (const [name, value] of values) task.env[`CONDUCTOR_INPUT_${envFragment(name)}`] = value;
  }
}
