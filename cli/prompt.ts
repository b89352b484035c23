// Asking for a secret on a terminal without showing it.
import { CliError } from './context.ts';

/**
 * Reads a line from a terminal without echoing it: raw mode, so no character
 * reaches the screen; backspace edits, Enter ends, Ctrl-C gives up.
 */
export function promptHidden(
  question: string,
  input: NodeJS.ReadableStream & { setRawMode?: (raw: boolean) => unknown },
  output: NodeJS.WritableStream,
): Promise<string> {
  output.write(question);
  input.setRawMode?.(true);
  input.setEncoding('utf8');
  input.resume();
  return new Promise((done, fail) => {
    let value = '';
    const finish = () => {
      input.off('data', onData);
      input.setRawMode?.(false);
      input.pause();
      output.write('\n');
    };
    const onData = (chunk: string | Buffer) => {
      for (const ch of String(chunk)) {
        if (ch === '\r' || ch === '\n' || ch === '\u0004') {
          finish();
          done(value);
          return;
        }
        if (ch === '\u0003') {
          finish();
          fail(new CliError('cancelled: nothing was set', 2));
          return;
        }
        if (ch === '\u007f' || ch === '\b') value = [...value].slice(0, -1).join('');
        else value += ch;
      }
    };
    input.on('data', onData);
  });
}
