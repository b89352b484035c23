// The body of the compile worker thread (lib/pipeline/worker.ts): compiles each pipeline file it
// is sent and answers the tasks, or the issues of the PipelineError, which cannot cross threads
// as an Error of its own class.
import { parentPort } from 'node:worker_threads';
import { compilePipeline } from './compile.ts';
import { PipelineError } from './issues.ts';
import type { CompileReply, CompileRequest } from './worker.ts';

const port = parentPort;
if (!port) throw new Error('lib/pipeline/worker-thread.ts runs only as a worker thread');

port.on('message', ({ text, trigger, files }: CompileRequest) => {
  let reply: CompileReply;
  try {
    reply = { ok: true, pipeline: compilePipeline(text, trigger, files) };
  } catch (error) {
    // compilePipeline throws nothing else; anything else would be a bug in it.
    const issues =
      error instanceof PipelineError
        ? error.issues
        : [{ line: 1, column: 1, path: '', message: `internal compiler error: ${String(error)}` }];
    reply = { ok: false, issues };
  }
  port.postMessage(reply);
});
port.postMessage({ ready: true });
