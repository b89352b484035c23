// Compiling off the event loop (the local stack's way). The local server answers every request
// from one thread, so a compile that takes seconds there would stall every claim, heartbeat and
// webhook meanwhile; here it runs on a worker thread, one compile at a time, under a time and a
// memory limit. Deployed, the compile function runs compilePipeline inline: one compile per
// invocation, bounded by the function's own timeout.
import { Worker } from 'node:worker_threads';
import type { CompileResult, PipelineCompiler } from './compile.ts';
import type { Trigger } from './glob.ts';
import type { IncludedFiles } from './include.ts';
import { PipelineError, type PipelineIssue } from './issues.ts';
import { COMPILE_MEMORY_MB, COMPILE_TIME_LIMIT_MS } from './limits.ts';

/** What the thread is sent for each compile. */
export interface CompileRequest {
  text: string;
  trigger: Trigger;
  /** The included files read so far (a Map crosses to the thread as one). */
  files?: IncludedFiles;
}

/** What the thread answers: the compiled pipeline, or the issues of its PipelineError. */
export type CompileReply =
  | { ok: true; pipeline: CompileResult }
  | { ok: false; issues: PipelineIssue[] };

export interface CompileWorkerOptions {
  /** A compile still running after this long is stopped with its thread; default 10 s. */
  timeLimitMs?: number;
  /** The heap the thread may use (V8's old generation), in MB; default 256. */
  memoryMb?: number;
  /** The thread's module: worker-thread.ts, or a stand-in speaking its protocol (tests). */
  entry?: URL;
  /** Handed to the thread as `workerData`. */
  workerData?: unknown;
}

// Set in the package's bundle (scripts/build-package.ts), where the thread's
// module is a file of its own beside the bundle; from source, the .ts beside this.
declare const __CONDUCTOR_COMPILE_THREAD__: string | undefined;

function defaultEntry(): URL {
  return typeof __CONDUCTOR_COMPILE_THREAD__ === 'string'
    ? new URL(__CONDUCTOR_COMPILE_THREAD__, import.meta.url)
    : new URL('./worker-thread.ts', import.meta.url);
}

// A thread that does not start within this long is given up; the compile is retried later.
const START_LIMIT_MS = 30_000;

function limitError(message: string): PipelineError {
  return new PipelineError([{ line: 1, column: 1, path: '', message }]);
}

function describeMs(ms: number): string {
  return `${ms / 1000} s`;
}

function spawn(entry: URL, options: { memoryMb: number; workerData: unknown }): Worker {
  const settings = {
    resourceLimits: { maxOldGenerationSizeMb: options.memoryMb },
    workerData: options.workerData,
  };
  if (!entry.pathname.endsWith('.ts')) return new Worker(entry, settings);
  // Run from source (npm start, the tests): Node 20 does not hand loader hooks such as
  // `--import tsx` to worker threads (nodejs/node#47747), so the thread registers tsx itself
  // before it imports its TypeScript module.
  const tsx = import.meta.resolve('tsx/esm/api');
  const boot = `import(${JSON.stringify(tsx)}).then((tsx) => { tsx.register(); return import(${JSON.stringify(entry.href)}); });`;
  return new Worker(boot, { ...settings, eval: true });
}

/**
 * A worker thread that compiles pipeline files one at a time, started on the first compile and
 * kept for the next. A compile over the time limit, or a thread out of memory, fails that
 * compile with a PipelineError naming the limit, and the next compile gets a fresh thread.
 */
export class CompileWorker {
  readonly #timeLimitMs: number;
  readonly #memoryMb: number;
  readonly #entry: URL;
  readonly #workerData: unknown;
  #worker: Worker | null = null;
  #ready: Promise<Worker> | null = null;
  #queue: Promise<unknown> = Promise.resolve();
  #pending = 0;

  constructor(options: CompileWorkerOptions = {}) {
    this.#timeLimitMs = options.timeLimitMs ?? COMPILE_TIME_LIMIT_MS;
    this.#memoryMb = options.memoryMb ?? COMPILE_MEMORY_MB;
    this.#entry = options.entry ?? defaultEntry();
    this.#workerData = options.workerData;
  }

  /** Compiles on the thread, after the compiles queued before it; a PipelineCompiler. */
  compile = (text: string, trigger: Trigger, files?: IncludedFiles): Promise<CompileResult> => {
    this.#pending++;
    this.#hold();
    const run = this.#queue.then(() => this.#run({ text, trigger, files }));
    this.#queue = run.then(
      () => this.#settled(),
      () => this.#settled(),
    );
    return run;
  };

  /** Stops the thread; a later compile starts a new one. */
  async close(): Promise<void> {
    const worker = this.#worker;
    this.#forget(worker);
    await worker?.terminate();
  }

  #settled(): void {
    this.#pending--;
    this.#hold();
  }

  // The thread keeps the process alive only while a compile waits for it, as a query would.
  #hold(): void {
    if (this.#pending > 0) this.#worker?.ref();
    else this.#worker?.unref();
  }

  #forget(worker: Worker | null): void {
    if (worker === null || this.#worker !== worker) return;
    this.#worker = null;
    this.#ready = null;
  }

  #thread(): Promise<Worker> {
    if (this.#ready) return this.#ready;
    const worker = spawn(this.#entry, { memoryMb: this.#memoryMb, workerData: this.#workerData });
    this.#worker = worker;
    this.#hold();
    // Always listened to: an 'error' nobody listens to would crash the server.
    worker.on('error', () => this.#forget(worker));
    worker.on('exit', () => this.#forget(worker));
    const failed = (cause: Error) => new Error('the compile worker could not start', { cause });
    this.#ready = this.#await(worker, START_LIMIT_MS, {
      message: (message) =>
        (message as { ready?: boolean } | null)?.ready === true ? { value: worker } : null,
      timeout: () => failed(new Error(`it did not start within ${describeMs(START_LIMIT_MS)}`)),
      error: failed,
      exit: (code) => failed(new Error(`it exited with code ${code}`)),
    });
    return this.#ready;
  }

  async #run(request: CompileRequest): Promise<CompileResult> {
    const worker = await this.#thread();
    const reply = this.#await<CompileResult>(worker, this.#timeLimitMs, {
      message: (message) => {
        const answer = message as CompileReply;
        return answer.ok ? { value: answer.pipeline } : { error: new PipelineError(answer.issues) };
      },
      timeout: () => {
        const limit = describeMs(this.#timeLimitMs);
        return limitError(
          `compiling took longer than ${limit}; at most ${limit} per compile are allowed`,
        );
      },
      error: (error) => {
        if (error.code !== 'ERR_WORKER_OUT_OF_MEMORY') {
          return new Error('the compile worker failed', { cause: error });
        }
        const mb = `${this.#memoryMb} MB`;
        return limitError(
          `compiling needed more than ${mb} of memory; at most ${mb} per compile are allowed`,
        );
      },
      exit: (code) => new Error(`the compile worker exited with code ${code}`),
    });
    worker.postMessage(request);
    return reply;
  }

  // Waits for the message `on.message` accepts, for at most `limitMs`. A timeout, an error or an
  // exit of the thread ends the wait with the error `on` makes of it, and stops the thread: a
  // compile cannot be interrupted any other way.
  #await<T>(
    worker: Worker,
    limitMs: number,
    on: {
      message(message: unknown): { value: T } | { error: Error } | null;
      timeout(): Error;
      error(error: Error & { code?: string }): Error;
      exit(code: number): Error;
    },
  ): Promise<T> {
    return new Promise<T>((resolve, reject) => {
      const timer = setTimeout(() => fail(on.timeout()), limitMs);
      const done = () => {
        clearTimeout(timer);
        worker.off('message', onMessage);
        worker.off('error', onError);
        worker.off('exit', onExit);
      };
      const fail = (error: Error) => {
        done();
        this.#forget(worker);
        void worker.terminate();
        reject(error);
      };
      const onMessage = (message: unknown) => {
        const outcome = on.message(message);
        if (outcome === null) return;
        done();
        if ('value' in outcome) resolve(outcome.value);
        else reject(outcome.error);
      };
      const onError = (error: Error) => fail(on.error(error));
      const onExit = (code: number) => fail(on.exit(code));
      worker.on('message', onMessage);
      worker.on('error', onError);
      worker.on('exit', onExit);
    });
  }
}

let shared: CompileWorker | null = null;

/** Compiles on the process's shared compile worker (the local stack's compiler). */
export const compileInWorker: PipelineCompiler = (text, trigger, files) => {
  shared ??= new CompileWorker();
  return shared.compile(text, trigger, files);
};
