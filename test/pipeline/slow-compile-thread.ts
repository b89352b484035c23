// A stand-in for lib/pipeline/worker-thread.ts that makes compiles slow on purpose, speaking the
// same protocol. workerData: { flags: SharedArrayBuffer (2 × Int32), mode }.
//   flags[0]  set to 1 by the thread once it is inside a compile
//   flags[1]  set to 1 by the test to let a 'hold' compile finish
//   mode      'hold': spin (busy, never yielding) until flags[1] is 1, then compile for real
//             'forever': spin until the thread is stopped
//             'hog': keep allocating until the heap limit stops the thread
import { parentPort, workerData } from 'node:worker_threads';
import { compilePipeline } from '../../lib/pipeline/compile.ts';
import { PipelineError } from '../../lib/pipeline/issues.ts';
import type { CompileReply, CompileRequest } from '../../lib/pipeline/worker.ts';

const { flags: buffer, mode } = workerData as { flags: SharedArrayBuffer; mode: string };
const flags = new Int32Array(buffer);
const port = parentPort;
if (!port) throw new Error('a worker thread only');

port.on('message', ({ text, trigger, files }: CompileRequest) => {
  Atomics.store(flags, 0, 1);
  const hoard: number[][] = [];
  while (mode === 'forever' || (mode === 'hold' && Atomics.load(flags, 1) === 0)) {
    // Busy: the thread's own event loop does not turn until the compile returns.
  }
  while (mode === 'hog') hoard.push(new Array(1_000_000).fill(hoard.length));
  let reply: CompileReply;
  try {
    reply = { ok: true, pipeline: compilePipeline(text, trigger, files) };
  } catch (error) {
    reply = { ok: false, issues: error instanceof PipelineError ? error.issues : [] };
  }
  port.postMessage(reply);
});
port.postMessage({ ready: true });
