// Reading the file a script writes its outputs to ($CONDUCTOR_OUTPUT).

const OUTPUT_NAME = /^[A-Za-z_][A-Za-z0-9_]*$/;
/** The control plane's limit on a task's outputs; the runner reads no more of the file than this. */
export const MAX_OUTPUTS_BYTES = 1024 * 1024;

/**
 * The outputs file could not be read as outputs; the message names the line.
 * It never quotes the file: under the docker executor, what the file holds
 * may be anything a container managed to put there.
 */
export class OutputsError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'OutputsError';
  }
}

/**
 * Parses `name=value` lines, and `name<<DELIMITER` … `DELIMITER` blocks for
 * values that span lines. Blank lines are skipped; a name written twice keeps
 * its last value.
 */
export function parseOutputs(text: string): Record<string, string> {
  const outputs: Record<string, string> = {};
  const lines = text.split('\n').map((l) => (l.endsWith('\r') ? l.slice(0, -1) : l));
  if (lines.at(-1) === '') lines.pop();
  for (let i = 0; i < lines.length; i++) {
    const line = lines[i]!;
    if (line.trim() === '') continue;
    // A name holds no `=`, so `a=x<<y` is the value `x<<y`, not a block.
    const heredoc = /^([^=<]*)<<(.+)$/.exec(line);
    const eq = line.indexOf('=');
    let name: string;
    let value: string;
    if (heredoc) {
      name = heredoc[1]!;
      const end = lines.indexOf(heredoc[2]!, i + 1);
      if (end === -1) {
        throw new OutputsError(
          `$CONDUCTOR_OUTPUT line ${i + 1}: the delimiter that ends this value is missing`,
        );
      }
      value = lines.slice(i + 1, end).join('\n');
      checkName(name, i + 1);
      i = end;
    } else if (eq > 0) {
      name = line.slice(0, eq);
      value = line.slice(eq + 1);
      checkName(name, i + 1);
    } else {
      throw new OutputsError(
        `$CONDUCTOR_OUTPUT line ${i + 1}: expected name=value or name<<DELIMITER`,
      );
    }
    outputs[name] = value;
  }
  return outputs;
}

function checkName(name: string, line: number): void {
  if (!OUTPUT_NAME.test(name)) {
    throw new OutputsError(
      `$CONDUCTOR_OUTPUT line ${line}: not a valid output name (letters, digits and _, not starting with a digit)`,
    );
  }
}
