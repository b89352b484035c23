// The JSON Schema of `.conductor.yml`, made from the zod definitions the
// compiler checks files with (schema.ts), for editors (the YAML language
// server) and `conductor schema`. It checks shapes; what zod checks in code
// (refinements, transforms: durations, cache keys, names of tasks in needs)
// stays the compiler's, so a file the schema accepts may still fail
// `conductor validate`, never the other way round for the shapes it covers.
import * as z from '../zod.ts';
import { ChangesInputSchema } from './changes.ts';
import { ConcurrencyObjectSchema } from './concurrency.ts';
import { HiddenTaskSchema, PipelineFileSchema } from './schema.ts';

/** Where the schema says it lives; the package ships it as dist/conductor.schema.json. */
export const SCHEMA_ID = 'https://conductor-ci.github.io/schema/conductor.schema.json';

type Json = Record<string, unknown>;

function jsonSchemaOf(schema: z.core.$ZodType): Json {
  // io 'input': what a person writes (before transforms such as `cache:` one-or-many);
  // unrepresentable 'any': a transform's input is anything the code then checks.
  const out = z.toJSONSchema(schema, {
    io: 'input',
    unrepresentable: 'any',
    target: 'draft-07',
  }) as Json;
  delete out.$schema;
  return out;
}

/** The JSON Schema (draft-07, as the YAML language server reads it) of a pipeline file. */
export function pipelineJsonSchema(): Json {
  const file = jsonSchemaOf(PipelineFileSchema);
  const properties = file.properties as Record<string, Json>;
  const task = (properties.tasks?.additionalProperties ?? {}) as Json;
  // The shorthands read before the schema (a preprocess: its input is anything
  // to zod's generator): `concurrency: GROUP` and `changes: PATTERN`.
  const shorthands = (fields: Record<string, Json>) => {
    fields.concurrency = {
      anyOf: [
        { type: 'string', minLength: 1, maxLength: 200 },
        jsonSchemaOf(ConcurrencyObjectSchema),
      ],
    };
    fields.changes = {
      anyOf: [{ type: 'string', minLength: 1, maxLength: 500 }, jsonSchemaOf(ChangesInputSchema)],
    };
  };
  shorthands(task.properties as Record<string, Json>);
  const hidden = jsonSchemaOf(HiddenTaskSchema);
  shorthands(hidden.properties as Record<string, Json>);
  properties.concurrency = (task.properties as Record<string, Json>).concurrency!;
  properties.tasks = {
    type: 'object',
    description:
      'The tasks: a script or a block step each; names starting with "." are hidden, for others to extend',
    patternProperties: { '^\\.': hidden },
    additionalProperties: {
      ...task,
      // TaskSchema's refinement: a script, or a block step instead of one
      // (a task extending another may take its script from there).
      anyOf: [{ required: ['script'] }, { required: ['block'] }, { required: ['extends'] }],
      not: { required: ['script', 'block'] },
      // A block step waits for block.timeout and has its fields for outputs.
      if: { required: ['block'] },
      // biome-ignore lint/suspicious/noThenProperty: JSON Schema's if/then, a nested keyword, never awaited
      then: { properties: { timeout: false, outputs: false } },
    },
  };
  return {
    $schema: 'http://json-schema.org/draft-07/schema#',
    $id: SCHEMA_ID,
    title: 'Conductor pipeline (.conductor.yml)',
    ...file,
  };
}
