// The compile worker thread (lib/pipeline/worker.ts): locally a compile runs off the event loop,
// under a time and a memory limit. A stand-in thread (slow-compile-thread.ts) makes compiles
// slow on purpose, held by a flag the test controls, so nothing here depends on timing.
import assert from 'node:assert/strict';
import { after, describe, test } from 'node:test';
import { compilePipeline, PipelineError } from '../../lib/pipeline/index.ts';
import { CompileWorker, type CompileWorkerOptions } from '../../lib/pipeline/worker.ts';
import { compiled, issuesOf, PUSH_MAIN, yaml } from './helpers.ts';

const SLOW_THREAD = new URL('./slow-compile-thread.ts', import.meta.url);

const PIPELINE = yaml`
  version: 1
  defaults: { env: { CI: true } }
  tasks:
    build: { script: [make], outputs: [version] }
    test:
      needs: [build]
      matrix: { node: [20, 22] }
      script: [make test]
`;

/** A compile worker on the stand-in thread, in `mode`; closed when the file ends. */
function slowWorker(mode: 'hold' | 'forever' | 'hog', options: CompileWorkerOptions = {}) {
  const flags = new Int32Array(new SharedArrayBuffer(8));
  const worker = new CompileWorker({
    ...options,
    entry: SLOW_THREAD,
    workerData: { flags: flags.buffer, mode },
  });
  after(() => worker.close());
  return { worker, flags };
}

/** Turns the event loop until `done` holds; fails if it does not within 30 s. */
async function turnUntil(done: () => boolean, what: string): Promise<void> {
  const deadline = Date.now() + 30_000;
  while (!done()) {
    if (Date.now() > deadline) assert.fail(`${what} did not happen within 30 s`);
    await new Promise((resolve) => setImmediate(resolve));
  }
}

function limitIssue(message: string) {
  return (error: unknown) => {
    assert.ok(error instanceof PipelineError, String(error));
    assert.deepEqual(error.issues, [{ line: 1, column: 1, path: '', message }]);
    return true;
  };
}

describe('compiling on a worker thread', () => {
  test('gives what compilePipeline gives, and its PipelineError with the same issues', async () => {
    const worker = new CompileWorker();
    after(() => worker.close());
    assert.deepEqual(
      await worker.compile(PIPELINE, PUSH_MAIN),
      compilePipeline(PIPELINE, PUSH_MAIN),
    );
    const broken = PIPELINE.replace('needs: [build]', 'needs: [biuld]');
    await assert.rejects(worker.compile(broken, PUSH_MAIN), (error: unknown) => {
      assert.ok(error instanceof PipelineError);
      assert.deepEqual(error.issues, issuesOf(broken));
      return true;
    });
  });

  test('while a compile keeps its thread busy, the event loop keeps turning', async () => {
    const { worker, flags } = slowWorker('hold');
    let settled = false;
    const result = worker.compile(PIPELINE, PUSH_MAIN).finally(() => {
      settled = true;
    });
    await turnUntil(() => Atomics.load(flags, 0) === 1, 'the thread entering the compile');
    // The thread spins until it is let go, so each of these turns happens while it is busy.
    let turns = 0;
    await turnUntil(() => ++turns >= 1000, 'a thousand turns of the event loop');
    let timerFired = false;
    setTimeout(() => {
      timerFired = true;
    }, 0);
    await turnUntil(() => timerFired, 'a timer firing');
    assert.equal(settled, false, 'the compile is still running');
    Atomics.store(flags, 1, 1);
    assert.deepEqual(await result, compilePipeline(PIPELINE, PUSH_MAIN));
  });

  test('a compile over the time limit fails naming the limit, and the next one gets a fresh thread', async () => {
    const { worker, flags } = slowWorker('hold', { timeLimitMs: 1000 });
    await assert.rejects(
      worker.compile(PIPELINE, PUSH_MAIN),
      limitIssue('compiling took longer than 1 s; at most 1 s per compile are allowed'),
    );
    Atomics.store(flags, 1, 1);
    assert.equal(compiled(await worker.compile(PIPELINE, PUSH_MAIN)).tasks.length, 3);
  });

  test('a compile that runs out of memory fails naming the memory limit', async () => {
    const { worker } = slowWorker('hog', { memoryMb: 64 });
    await assert.rejects(
      worker.compile(PIPELINE, PUSH_MAIN),
      limitIssue(
        'compiling needed more than 64 MB of memory; at most 64 MB per compile are allowed',
      ),
    );
  });

  test('compiles sent at once run one after another on the one thread', async () => {
    const { worker, flags } = slowWorker('hold');
    const first = worker.compile(PIPELINE, PUSH_MAIN);
    const second = worker.compile('version: 1\ntasks: { a: { script: [x] } }\n', PUSH_MAIN);
    await turnUntil(() => Atomics.load(flags, 0) === 1, 'the thread entering the first compile');
    Atomics.store(flags, 1, 1);
    assert.equal(compiled(await first).tasks.length, 3);
    assert.equal(compiled(await second).tasks.length, 1);
  });
});
