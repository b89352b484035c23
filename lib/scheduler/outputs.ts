// What a task's outputs may weigh, as a claim hands them out: the limits of
// docs/limits.md on outputs, checked by the completion route (checkOutputs)
// and by the promotion of a task that needs them (progress.ts).
import { PayloadTooLargeError, ValidationError } from '../errors.ts';
import { describeBytes } from '../pipeline/limits.ts';

const MiB = 1024 * 1024;

/** The most one task's outputs may weigh (see outputBytes). */
export const MAX_OUTPUT_BYTES = MiB;

/**
 * The most the outputs of the tasks one task needs may weigh together, in
 * the same measure: a claim answers them all (needs_outputs). With a task's
 * compiled strings (at most 1 MiB) and its secret values (at most 2 MiB), a
 * claim's answer stays well under the 6 MB a Lambda may answer.
 */
export const MAX_INHERITED_OUTPUT_BYTES = MiB;

/**
 * What outputs weigh as a claim hands them out: each name and value as a
 * JSON string (quoted and escaped, so a control character counts six bytes)
 * in UTF-8 bytes, plus the colon and comma between. The promotion measures
 * inherited outputs the same way in SQL (lib/scheduler/progress.ts).
 */
export function outputBytes(outputs: Record<string, string>): number {
  let bytes = 0;
  for (const [name, value] of Object.entries(outputs)) {
    bytes += Buffer.byteLength(JSON.stringify(name)) + Buffer.byteLength(JSON.stringify(value)) + 2;
  }
  return bytes;
}

/** A task's name and the outputs its pipeline declares. */
export interface TaskOutputs {
  name: string;
  outputs: string[];
}

/**
 * Refuses outputs the task does not declare (400, naming each) and outputs
 * over MAX_OUTPUT_BYTES (413). The completion route calls it, with the task
 * read, before either way of recording the outcome.
 */
export function checkOutputs(outputs: Record<string, string>, task: TaskOutputs): void {
  const undeclared = Object.keys(outputs).filter((name) => !task.outputs.includes(name));
  if (undeclared.length > 0) {
    const declared =
      task.outputs.length > 0 ? `it declares ${task.outputs.join(', ')}` : 'it declares none';
    throw new ValidationError(
      undeclared.map((name) => ({
        path: `outputs.${name}`,
        message: `output "${name}" is not declared by task "${task.name}" (${declared})`,
      })),
    );
  }
  const bytes = outputBytes(outputs);
  if (bytes > MAX_OUTPUT_BYTES) {
    throw new PayloadTooLargeError(
      `the outputs weigh ${bytes} bytes as JSON; at most ${describeBytes(MAX_OUTPUT_BYTES)} of outputs per task are allowed`,
    );
  }
}
