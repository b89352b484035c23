import * as z from '../zod.ts';
import { ChangesSchema } from './changes.ts';
import { ConcurrencySchema } from './concurrency.ts';
import { InputsSchema } from './inputs.ts';
import type { PathSegment } from './issues.ts';
import { MAX_OUTPUTS, MAX_SECRETS } from './limits.ts';
import { describeValue, quote, type Suggester } from './messages.ts';
import { envFragment, MATRIX_KEY_PATTERN, VAR_NAME_PATTERN } from './names.ts';
import { pathPatternProblem } from './pathglob.ts';
import { WhenSchema } from './when.ts';

/** Timeout of a task when neither it nor the defaults set one: one hour. */
export const DEFAULT_TIMEOUT_S = 3600;
/** How long a task may wait in the queue for a worker when neither it nor the defaults say: 24 hours. */
export const DEFAULT_QUEUE_TIMEOUT_S = 24 * 60 * 60;
/** Extra attempts after transient failures when neither the task nor the defaults say. */
export const DEFAULT_RETRIES = 2;
const MAX_RETRIES = 10;
const MAX_TIMEOUT_S = 7 * 24 * 60 * 60;

const VAR_RULE = 'letters, digits and _, not starting with a digit';

const UNIT_SECONDS: Readonly<Record<string, number>> = { s: 1, m: 60, h: 3600, d: 86_400 };

/** Reads a timeout (`90s`, `10m`, `2h`, `1d`, or whole seconds) as seconds, or says what is wrong. */
export function parseTimeout(value: unknown): { seconds: number } | { error: string } {
  const got = describeValue(value);
  let seconds = Number.NaN;
  if (typeof value === 'number' && Number.isInteger(value)) {
    seconds = value;
  } else if (typeof value === 'string') {
    const match = /^([0-9]+)([smhd])$/.exec(value);
    if (match) seconds = Number(match[1]) * (UNIT_SECONDS[match[2] ?? 's'] ?? 1);
  }
  if (Number.isNaN(seconds)) {
    return { error: `expected whole seconds or a duration such as 90s, 10m, 2h, got ${got}` };
  }
  if (seconds <= 0) return { error: `must be positive, got ${got}` };
  if (seconds > MAX_TIMEOUT_S) {
    return { error: `must be at most 7 days (${MAX_TIMEOUT_S} seconds), got ${got}` };
  }
  return { seconds };
}

const TimeoutSchema = z.pipe(
  z.unknown(),
  z.transform((value, ctx) => {
    if (value === undefined) return undefined;
    const parsed = parseTimeout(value);
    if ('error' in parsed) {
      ctx.issues.push({ code: 'custom', message: parsed.error, input: value });
      return z.NEVER;
    }
    return parsed.seconds;
  }),
);

const RetriesSchema = z.number().check(z.int(), z.gte(0), z.lte(MAX_RETRIES));

const ScalarSchema = z.union([z.string(), z.number(), z.boolean()], {
  error: (issue) =>
    issue.input === undefined
      ? undefined
      : `expected a string, number or boolean, got ${describeValue(issue.input)}`,
});

function nameSchema(pattern: RegExp, what: string, rule: string) {
  return z.string().check(
    z.regex(pattern, {
      error: (issue) => `${quote(String(issue.input))} is not a valid ${what} (${rule})`,
    }),
  );
}

const EnvSchema = z.record(
  nameSchema(VAR_NAME_PATTERN, 'environment variable name', VAR_RULE),
  ScalarSchema,
);

const LabelsSchema = z.array(z.string().check(z.minLength(1, 'must not be empty')));

const RefPatternSchema = z.string().check(z.minLength(1, 'a ref pattern must not be empty'));

const OnlySchema = z.pipe(
  z.union(
    [
      RefPatternSchema,
      z.array(RefPatternSchema).check(z.minLength(1, 'must list at least one ref pattern')),
    ],
    {
      error: (issue) =>
        issue.input === undefined
          ? undefined
          : `expected a ref pattern or a list of them, got ${describeValue(issue.input)}`,
    },
  ),
  z.transform((only) => (typeof only === 'string' ? [only] : only)),
);

const OutputsSchema = z.array(nameSchema(VAR_NAME_PATTERN, 'output name', VAR_RULE)).check(
  z.maxLength(MAX_OUTPUTS, `must list at most ${MAX_OUTPUTS} outputs`),
  z.superRefine((outputs, ctx) => {
    // Outputs reach the tasks that need them as CONDUCTOR_NEEDS_<TASK>_<OUTPUT>, so two names
    // that mangle alike would overwrite each other.
    const byFragment = new Map<string, string>();
    outputs.forEach((name, index) => {
      const fragment = envFragment(name);
      const earlier = byFragment.get(fragment);
      if (fragment === '') {
        ctx.addIssue({
          code: 'custom',
          path: [index],
          message: `output name ${quote(name)} needs a letter or digit`,
        });
      } else if (earlier === name) {
        ctx.addIssue({ code: 'custom', path: [index], message: `duplicate output ${quote(name)}` });
      } else if (earlier !== undefined) {
        ctx.addIssue({
          code: 'custom',
          path: [index],
          message: `outputs ${quote(earlier)} and ${quote(name)} would both be passed on as CONDUCTOR_NEEDS_<TASK>_${fragment}`,
        });
      } else {
        byFragment.set(fragment, name);
      }
    });
  }),
);

const MatrixKeySchema = nameSchema(
  MATRIX_KEY_PATTERN,
  'matrix key',
  'letters, digits, _ and -, starting with a letter or _',
);

/** One entry of a matrix's `include` or `exclude`: matrix key → value. */
const CombinationSchema = z
  .record(MatrixKeySchema, ScalarSchema)
  .check(
    z.refine((combination) => Object.keys(combination).length > 0, 'must name at least one key'),
  );

/** Marks a custom issue to be reported at its key rather than its value (see toProblems). */
const AT_KEY = { target: 'key' };

/** The reserved keys of a matrix; every other key is an axis. */
export const MATRIX_RESERVED_KEYS: readonly string[] = ['include', 'exclude'];

/**
 * A task's matrix: axes (key → non-empty list of values), and optionally `exclude` and `include`
 * (lists of key → value). An empty matrix, clashing keys, and what include and exclude name are
 * checked with the task graph, where the keys' positions are known.
 */
export const MatrixSchema = z
  .catchall(
    z.object({
      include: z.optional(z.array(CombinationSchema)),
      exclude: z.optional(z.array(CombinationSchema)),
    }),
    z.array(ScalarSchema).check(z.minLength(1, 'must have at least one value')),
  )
  .check(
    z.superRefine((matrix, ctx) => {
      // A catchall does not check key names; a record would, but cannot give include and exclude
      // their own shape.
      for (const key of Object.keys(matrix)) {
        if (MATRIX_RESERVED_KEYS.includes(key) || MatrixKeySchema.safeParse(key).success) continue;
        ctx.addIssue({
          code: 'custom',
          path: [key],
          params: AT_KEY,
          message: `${quote(key)} is not a valid matrix key (letters, digits, _ and -, starting with a letter or _)`,
        });
      }
    }),
  );

/** The names `extends` takes: one hidden task, or a list of them. */
const ExtendsSchema = z.union(
  [z.string(), z.array(z.string()).check(z.minLength(1, 'must name at least one hidden task'))],
  {
    error: (issue) =>
      issue.input === undefined
        ? undefined
        : `expected a hidden task's name or a list of them, got ${describeValue(issue.input)}`,
  },
);

/** Most services one task may start beside its script. */
export const MAX_SERVICES = 10;
/** How long a service's health command may keep failing before the task fails: one minute. */
export const DEFAULT_SERVICE_HEALTH_TIMEOUT_S = 60;

// A service is reached by its name on the task's network: a DNS label.
const SERVICE_NAME = /^[a-z][a-z0-9-]{0,62}$/;

/** Most words in a service's `command` or `entrypoint`, and the longest word. */
export const MAX_SERVICE_WORDS = 100;
const MAX_SERVICE_WORD = 4096;
const ServiceWordsSchema = z
  .array(
    z
      .string()
      .check(z.maxLength(MAX_SERVICE_WORD, `must be at most ${MAX_SERVICE_WORD} characters`)),
    {
      error: (issue) =>
        issue.input === undefined
          ? undefined
          : `expected a list of words, e.g. [redis-server, --port, '6380'], got ${describeValue(issue.input)}`,
    },
  )
  .check(z.maxLength(MAX_SERVICE_WORDS, `must have at most ${MAX_SERVICE_WORDS} words`));

/** One container started beside a task's script on the docker executor (`services:`). */
export const ServiceSchema = z.strictObject({
  image: z.string().check(z.minLength(1, 'must not be empty')),
  env: z.optional(EnvSchema),
  ports: z.optional(
    z.array(z.number().check(z.int(), z.gte(1), z.lte(65_535))).check(z.maxLength(20)),
  ),
  // A command run in the service's container until it succeeds; the script starts after.
  health: z.optional(z.string().check(z.minLength(1, 'must not be empty'))),
  health_timeout: z.optional(TimeoutSchema),
  // As GitLab's: lists of words, no shell in between.
  command: z.optional(ServiceWordsSchema.check(z.minLength(1, 'must not be empty'))),
  entrypoint: z.optional(ServiceWordsSchema),
});

const ServicesSchema = z
  .record(
    nameSchema(
      SERVICE_NAME,
      'service name',
      'lowercase letters, digits and -, starting with a letter',
    ),
    ServiceSchema,
  )
  .check(
    z.refine((services) => Object.keys(services).length <= MAX_SERVICES, {
      message: `must list at most ${MAX_SERVICES} services`,
    }),
  );

/** How long a block step waits to be unblocked when it does not say: 24 hours. */
export const DEFAULT_BLOCK_TIMEOUT_S = 24 * 60 * 60;
/** Most fields one block step may ask for. */
export const MAX_BLOCK_FIELDS = 20;

/** One field a block step asks for when it is unblocked; its value becomes an output. */
export const BlockFieldSchema = z
  .strictObject({
    name: nameSchema(VAR_NAME_PATTERN, 'field name', VAR_RULE),
    type: z.optional(z.enum(['text', 'select'])),
    required: z.optional(z.boolean()),
    options: z.optional(
      z
        .array(z.string().check(z.minLength(1, 'must not be empty')))
        .check(z.minLength(1), z.maxLength(100)),
    ),
  })
  .check(
    z.superRefine((field, ctx) => {
      if (field.type === 'select' && field.options === undefined) {
        ctx.addIssue({ code: 'custom', path: [], message: 'a select field needs options' });
      }
      if (field.type !== 'select' && field.options !== undefined) {
        ctx.addIssue({
          code: 'custom',
          path: ['options'],
          message: 'only a select field has options',
        });
      }
    }),
  );

/** `block:`: a step that waits for someone to unblock it, runs no script and holds no runner. */
export const BlockSchema = z.strictObject({
  prompt: z
    .string()
    .check(
      z.minLength(1, 'must not be empty'),
      z.maxLength(200, 'must be at most 200 characters'),
      z.regex(/^\P{Cc}*$/u, 'must be one line without control characters'),
    ),
  fields: z.optional(
    z.array(BlockFieldSchema).check(
      z.maxLength(MAX_BLOCK_FIELDS, `must list at most ${MAX_BLOCK_FIELDS} fields`),
      z.superRefine((fields, ctx) => {
        const seen = new Set<string>();
        fields.forEach((field, index) => {
          if (seen.has(field.name)) {
            ctx.addIssue({
              code: 'custom',
              path: [index, 'name'],
              message: `duplicate field ${quote(field.name)}`,
            });
          }
          seen.add(field.name);
        });
      }),
    ),
  ),
  timeout: z.optional(TimeoutSchema),
  on_timeout: z.optional(z.enum(['fail', 'skip'])),
});

// ---- artifacts: and cache: (issue #37, docs/artifacts.md)

/** Default and largest `expire_in` of a task's artifacts. */
export const DEFAULT_ARTIFACT_EXPIRY_S = 30 * 86_400;
const MAX_ARTIFACT_EXPIRY_S = 400 * 86_400;

/** Reads an artifact's `expire_in` (`7d`, `12h`, or whole seconds) as seconds, or says what is wrong. */
export function parseExpiry(value: unknown): { seconds: number } | { error: string } {
  const got = describeValue(value);
  let seconds = Number.NaN;
  if (typeof value === 'number' && Number.isInteger(value)) seconds = value;
  else if (typeof value === 'string') {
    const match = /^([0-9]+)([smhd])$/.exec(value);
    if (match) seconds = Number(match[1]) * (UNIT_SECONDS[match[2] ?? 's'] ?? 1);
  }
  if (Number.isNaN(seconds)) return { error: `expected a duration such as 7d or 12h, got ${got}` };
  if (seconds <= 0) return { error: `must be positive, got ${got}` };
  if (seconds > MAX_ARTIFACT_EXPIRY_S) return { error: `must be at most 400d, got ${got}` };
  return { seconds };
}

const ExpirySchema = z.pipe(
  z.unknown(),
  z.transform((value, ctx) => {
    const parsed = parseExpiry(value);
    if ('error' in parsed) {
      ctx.issues.push({ code: 'custom', message: parsed.error, input: value });
      return z.NEVER;
    }
    return parsed.seconds;
  }),
);

/** A path or glob in the checkout: relative, never leaving it. */
const WorkspacePathSchema = z.string().check(
  z.minLength(1, 'must not be empty'),
  z.maxLength(1024, 'must be at most 1024 characters'),
  z.refine((p) => !p.startsWith('/') && !p.startsWith('~'), 'must be relative to the checkout'),
  z.refine((p) => !p.split('/').includes('..'), 'must not leave the checkout ("..")'),
  z.refine((p) => !/[\0\n\r]/.test(p), 'must be one line'),
  z.refine(
    (p) => !p.startsWith('!'),
    'paths cannot exclude (a leading !); write \\! to name a file',
  ),
  z.superRefine((p, ctx) => {
    // The runner's matcher (lib/pipeline/pathglob.ts): refused here, at the line, not on the runner.
    const problem = pathPatternProblem(p);
    if (problem !== null) ctx.addIssue({ code: 'custom', message: problem, input: p });
  }),
);

const ArtifactsSchema = z.strictObject({
  paths: z
    .array(WorkspacePathSchema)
    .check(z.minLength(1, 'must list at least one path'), z.maxLength(100)),
  expire_in: z.optional(ExpirySchema),
  when: z.optional(z.enum(['on_success', 'on_failure', 'always'])),
});

/** Most paths or globs under `reports: junit:` (lib/reports/limits.ts says the same). */
export const MAX_REPORT_PATHS = 20;

// `reports: {junit: [...]}` (issue #54): test reports the runner uploads after the script.
const ReportsSchema = z.strictObject({
  junit: z
    .array(WorkspacePathSchema)
    .check(
      z.minLength(1, 'must list at least one path'),
      z.maxLength(MAX_REPORT_PATHS, `must list at most ${MAX_REPORT_PATHS} paths`),
    ),
});

/** `{{ hash 'file' ... }}` in a cache key: the runner puts the files' hash there. */
export const HASH_TEMPLATE = /\{\{\s*hash((?:\s+'[^']+')+)\s*\}\}/g;

const CacheKeySchema = z.string().check(
  z.minLength(1, 'must not be empty'),
  z.maxLength(512, 'must be at most 512 characters'),
  z.refine((key) => !key.replace(HASH_TEMPLATE, '').includes('{{'), {
    message: "the only template a cache key may hold is {{ hash 'file' }}",
  }),
  z.refine((key) => !/[\0\n\r,]/.test(key), 'must be one line without commas'),
);

const CacheEntrySchema = z.strictObject({
  key: CacheKeySchema,
  restore_keys: z.optional(z.array(CacheKeySchema).check(z.maxLength(20))),
  paths: z
    .array(WorkspacePathSchema)
    .check(z.minLength(1, 'must list at least one path'), z.maxLength(100)),
  policy: z.optional(z.enum(['pull', 'push', 'pull-push'])),
});

const CacheSchema = z.pipe(
  z.union([CacheEntrySchema, z.array(CacheEntrySchema).check(z.minLength(1), z.maxLength(10))], {
    error: (issue) =>
      issue.input === undefined
        ? undefined
        : `expected a cache (key, paths) or a list of them, got ${describeValue(issue.input)}`,
  }),
  z.transform((cache) => (Array.isArray(cache) ? cache : [cache])),
);

/** The fields of one entry under `tasks:`; TaskSchema adds what ties them together. */
const TaskFields = z.strictObject({
  script: z.optional(
    z.array(z.string()).check(z.minLength(1, 'script must have at least one line')),
  ),
  block: z.optional(BlockSchema),
  changes: z.optional(ChangesSchema),
  concurrency: z.optional(ConcurrencySchema),
  image: z.optional(z.string().check(z.minLength(1, 'must not be empty'))),
  needs: z.optional(z.array(z.string())),
  only: z.optional(OnlySchema),
  allow_failure: z.optional(z.boolean()),
  retries: z.optional(RetriesSchema),
  timeout: z.optional(TimeoutSchema),
  queue_timeout: z.optional(TimeoutSchema),
  labels: z.optional(LabelsSchema),
  env: z.optional(EnvSchema),
  secrets: z.optional(
    z
      .array(nameSchema(VAR_NAME_PATTERN, 'secret name', VAR_RULE))
      .check(z.maxLength(MAX_SECRETS, `must list at most ${MAX_SECRETS} secrets`)),
  ),
  outputs: z.optional(OutputsSchema),
  matrix: z.optional(MatrixSchema),
  fail_fast: z.optional(z.boolean()),
  services: z.optional(ServicesSchema),
  artifacts: z.optional(ArtifactsSchema),
  cache: z.optional(CacheSchema),
  reports: z.optional(ReportsSchema),
  // Which outcomes of its needs, and which triggers, run the task (lib/pipeline/when.ts).
  when: z.optional(WhenSchema),
  // Resolved before the schema sees the task (lib/pipeline/extends.ts); checked here for its shape.
  extends: z.optional(ExtendsSchema),
});

/** One entry under `tasks:`: a script, or a block step (`block:`) instead of one. */
export const TaskSchema = TaskFields.check(
  z.superRefine((task, ctx) => {
    if (task.block !== undefined) {
      if (task.script !== undefined) {
        ctx.addIssue({
          code: 'custom',
          path: ['block'],
          message: 'a block step runs no script: remove script or block',
        });
      }
      if (task.outputs !== undefined) {
        ctx.addIssue({
          code: 'custom',
          path: ['outputs'],
          message: "a block step's outputs are its fields",
        });
      }
      if (task.timeout !== undefined) {
        ctx.addIssue({
          code: 'custom',
          path: ['timeout'],
          message: 'a block step waits for block.timeout: move timeout under block',
        });
      }
    } else if (task.script === undefined) {
      // Reported as a missing key, as when script was required outright.
      ctx.addIssue({ code: 'custom', path: ['script'], message: REQUIRED });
    }
  }),
);
export type Task = z.infer<typeof TaskSchema>;

/** A hidden task (its name starts with "."): any part of a task, for others to extend. */
export const HiddenTaskSchema = z.partial(TaskFields);

/** The `defaults:` section: settings every task starts from. */
export const DefaultsSchema = z.strictObject({
  image: z.optional(z.string().check(z.minLength(1, 'must not be empty'))),
  timeout: z.optional(TimeoutSchema),
  queue_timeout: z.optional(TimeoutSchema),
  retries: z.optional(RetriesSchema),
  env: z.optional(EnvSchema),
  labels: z.optional(LabelsSchema),
});

/** The whole of `.conductor.yml`, as documented in docs/pipeline.md. */
export const PipelineFileSchema = z.strictObject({
  version: z.literal(1, {
    error: (issue) =>
      issue.input === undefined ? undefined : `must be 1, got ${describeValue(issue.input)}`,
  }),
  name: z.optional(
    z
      .string()
      .check(
        z.minLength(1, 'must not be empty'),
        z.maxLength(100, 'must be at most 100 characters'),
        z.regex(/^\P{Cc}*$/u, 'must be one line without control characters'),
      ),
  ),
  defaults: z.optional(DefaultsSchema),
  // What a manual or scheduled run may be given (lib/pipeline/inputs.ts).
  inputs: z.optional(InputsSchema),
  // The whole job's concurrency group (lib/pipeline/concurrency.ts).
  concurrency: z.optional(ConcurrencySchema),
  // Its items are checked as the files are read (lib/pipeline/include.ts), where their files are.
  include: z.optional(z.unknown()),
  // Task names are checked with the graph, so a badly named task still has its body checked.
  tasks: z.record(z.string(), TaskSchema),
});
export type PipelineFile = z.infer<typeof PipelineFileSchema>;

/** A schema failure: the path to report, the path to point at, and whether at its key or value. */
export interface SchemaProblem {
  path: PathSegment[];
  at: PathSegment[];
  target: 'key' | 'value';
  message: string;
}

// Marks a missing required key in the error map, so it can be reported on the map that lacks it.
const REQUIRED = 'required';

const EXPECTED: Record<string, string> = {
  string: 'a string',
  number: 'a number',
  int: 'a whole number',
  boolean: 'true or false',
  array: 'a list',
  object: 'a map',
  record: 'a map',
};

const errorMap: z.core.$ZodErrorMap = (issue) => {
  // zod reports a missing key as a value of the wrong kind; toProblems moves it to the parent map.
  if (
    (issue.code === 'invalid_type' || issue.code === 'invalid_value') &&
    issue.input === undefined
  ) {
    return REQUIRED;
  }
  switch (issue.code) {
    case 'invalid_type':
      return `expected ${EXPECTED[issue.expected] ?? issue.expected}, got ${describeValue(issue.input)}`;
    case 'invalid_value':
      return `must be ${issue.values.map((value) => JSON.stringify(value)).join(' or ')}`;
    case 'too_small':
      if (issue.origin === 'array') return `must have at least ${issue.minimum} item(s)`;
      if (issue.origin === 'string') return 'must not be empty';
      return `must be at least ${issue.minimum}`;
    case 'too_big':
      if (issue.origin === 'array') return `must have at most ${issue.maximum} item(s)`;
      if (issue.origin === 'string') return `must be at most ${issue.maximum} characters`;
      return `must be at most ${issue.maximum}`;
    case 'invalid_format':
      return 'pattern' in issue && issue.pattern ? `must match ${issue.pattern}` : undefined;
    default:
      return undefined;
  }
};

/** What an included file may hold: tasks (hidden ones too) and more includes. */
export const IncludedFileSchema = z.strictObject({
  tasks: z.record(z.string(), z.unknown()),
  include: z.optional(z.unknown()),
});

function knownKeys(path: readonly PathSegment[], top: readonly string[]): string[] {
  if (path.length === 0) return [...top];
  if (path.length === 1 && path[0] === 'defaults') return Object.keys(DefaultsSchema.shape);
  if (path.length === 2 && path[0] === 'tasks') return Object.keys(TaskSchema.shape);
  if (path.length === 3 && path[0] === 'tasks' && path[2] === 'changes') {
    return ['include', 'exclude'];
  }
  if (path.length === 3 && path[0] === 'tasks' && path[2] === 'block') {
    return Object.keys(BlockSchema.shape);
  }
  if (path.length === 5 && path[0] === 'tasks' && path[2] === 'block' && path[3] === 'fields') {
    return Object.keys(BlockFieldSchema.shape);
  }
  if (path.length === 3 && path[0] === 'tasks' && path[2] === 'artifacts') {
    return Object.keys(ArtifactsSchema.shape);
  }
  if (path.length === 3 && path[0] === 'tasks' && path[2] === 'reports') {
    return Object.keys(ReportsSchema.shape);
  }
  if ((path.length === 3 || path.length === 4) && path[0] === 'tasks' && path[2] === 'cache') {
    return Object.keys(CacheEntrySchema.shape);
  }
  if (path.length === 4 && path[0] === 'tasks' && path[2] === 'services') {
    return Object.keys(ServiceSchema.shape);
  }
  return [];
}

function toProblems(
  issue: z.core.$ZodIssue,
  prefix: PathSegment[],
  out: SchemaProblem[],
  suggester: Suggester,
  top: readonly string[],
): void {
  const path = [
    ...prefix,
    ...issue.path.map((segment) => (typeof segment === 'symbol' ? String(segment) : segment)),
  ];
  if (issue.code === 'unrecognized_keys') {
    for (const key of issue.keys) {
      const hint = suggester.suggest(key, knownKeys(path, top));
      out.push({
        path,
        at: [...path, key],
        target: 'key',
        message: `unknown key ${quote(key)}${hint}`,
      });
    }
    return;
  }
  if (issue.code === 'invalid_key') {
    out.push({ path, at: path, target: 'key', message: issue.issues[0]?.message ?? issue.message });
    return;
  }
  if (issue.code === 'custom' && issue.params?.target === AT_KEY.target) {
    out.push({ path, at: path, target: 'key', message: issue.message });
    return;
  }
  if (issue.code === 'invalid_union') {
    // Report the branch that got inside the value (a list with one bad item), if one did.
    const branch = issue.errors.find(
      (errors) => errors.length > 0 && errors.every((inner) => inner.path.length > 0),
    );
    if (branch) {
      for (const inner of branch) toProblems(inner, path, out, suggester, top);
      return;
    }
  }
  if (issue.message === REQUIRED && path.length > 0) {
    const parent = path.slice(0, -1);
    const key = String(path[path.length - 1]);
    out.push({
      path: parent,
      at: parent,
      target: 'value',
      message: `missing required key ${quote(key)}`,
    });
    return;
  }
  out.push({ path, at: path, target: 'value', message: issue.message });
}

/** Checks converted YAML against the pipeline format; each problem says where it belongs. */
export function checkPipelineFile(
  value: unknown,
  suggester: Suggester,
): {
  file: PipelineFile | null;
  problems: SchemaProblem[];
} {
  const { data, problems } = checkWith(PipelineFileSchema, value, [], suggester);
  return { file: data, problems };
}

/**
 * Checks a value against one of the schemas above, as found at `prefix` in its file (a hidden
 * task at ['tasks', '.base'], an included file at []); each problem says where it belongs.
 */
export function checkWith<T>(
  schema: z.ZodMiniType<T>,
  value: unknown,
  prefix: PathSegment[],
  suggester: Suggester,
): { data: T | null; problems: SchemaProblem[] } {
  const result = schema.safeParse(value, { error: errorMap });
  if (result.success) return { data: result.data, problems: [] };
  const top = Object.keys(
    schema === (IncludedFileSchema as unknown)
      ? IncludedFileSchema.shape
      : PipelineFileSchema.shape,
  );
  const problems: SchemaProblem[] = [];
  for (const issue of result.error.issues) toProblems(issue, prefix, problems, suggester, top);
  return { data: null, problems };
}
