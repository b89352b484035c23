// Task logs, stored per attempt in chunks keyed by the byte offset the runner
// counted, so a retried upload of a chunk is recognised and stored once; and
// the masking of what a runner reports (log text, errors, outputs) with the
// values its task was given (lib/masking.ts). Reading logs back is
// lib/scheduler/task-log.ts.
import { type Pool, type Queryable, transaction } from '../db/index.ts';
import { ConflictError, NotFoundError, PayloadTooLargeError } from '../errors.ts';
import { Masker } from '../masking.ts';
import { describeBytes } from '../pipeline/limits.ts';
import { checkOutputs, type TaskOutputs } from '../scheduler/outputs.ts';
import { decrypt, type Keyring, SecretDecryptError } from '../secrets.ts';
import { forgeToken, sealContext } from './projects.ts';

export const MAX_CHUNK_BYTES = 1024 * 1024;

const MiB = 1024 * 1024;

/**
 * The job's log quota is counted in blocks of a 64th of it (at most 1 MiB):
 * an attempt's log holds every block it has entered, and an attempt is
 * checked against the quota only when a chunk takes it into a new block, so
 * the sum over the job's attempts is read once a block per attempt, not once
 * a chunk, and no row is written for it (a counter per job would be a row
 * every logging task of the job waits for: see checkJobQuota).
 */
function logQuotaBlock(quota: number): number {
  return Math.max(1, Math.min(MiB, Math.floor(quota / 64)));
}

export interface AppendLog {
  workerId: string;
  taskId: string;
  leaseId: string;
  offset: number;
  data: string;
  /** The most a task's attempt may log, in bytes. */
  maxBytes: number;
  /** The most all attempts of all tasks of the task's job may log, in bytes. */
  jobMaxBytes: number;
}

/**
 * Appends a chunk to the current attempt's log. `offset` and the answered size
 * count the bytes the runner sent (UTF-8). A chunk already stored (wholly
 * below the size) is accepted without storing it again; the part of a chunk
 * past the size is stored; an offset past the size is a conflict that carries
 * the size, so the runner can resend from there. Past the attempt's limit or
 * the job's quota the chunk is refused (413) and nothing else changes: the
 * task runs on.
 */
export async function appendLog(
  pool: Pool,
  keyring: Keyring,
  input: AppendLog,
): Promise<{ size: number }> {
  const bytes = Buffer.from(input.data, 'utf8');
  if (bytes.length > MAX_CHUNK_BYTES) {
    throw new PayloadTooLargeError(`a log chunk is at most ${MAX_CHUNK_BYTES} bytes`);
  }
  // Keyed plans: every read starts from a key (the task, its attempt, the
  // job's tasks, the chunk's foreign-key check); on tables analysed while
  // empty a session planned them as scans and kept those plans (issue #36,
  // test/e2e/runner-plans.test.ts).
  return transaction(
    pool,
    async (tx) => {
      const { rows } = await tx.query<
        MaskSource & {
          state: string;
          lease_id: string | null;
          worker_id: string | null;
          attempt: number;
          job_id: string;
        }
      >(
        `select t.state, t.lease_id, t.worker_id, t.attempt, t.job_id, ${MASK_SOURCE}
         from tasks t join jobs j on j.id = t.job_id join projects p on p.id = j.project_id
        where t.id = $1`,
        [input.taskId],
      );
      const task = rows[0];
      if (!task) throw new NotFoundError(`task ${input.taskId} does not exist`);
      if (
        task.state !== 'running' ||
        task.lease_id !== input.leaseId ||
        task.worker_id !== input.workerId
      ) {
        throw new ConflictError(
          `lease is not the task's current one (expired, completed, or held by another worker)`,
        );
      }
      // Locking the attempt row serialises the chunks of one attempt; a
      // completion that finished the attempt after our snapshot makes this raise
      // 40001, and the retry finds the lease gone.
      const attempt = await tx.query<{ log_size: number }>(
        'select log_size from task_attempts where task_id = $1 and attempt = $2 for update',
        [input.taskId, task.attempt],
      );
      const size = Number(attempt.rows[0]!.log_size);
      if (input.offset > size) {
        const err = new ConflictError(`offset ${input.offset} is past the log's size ${size}`);
        err.details = { size };
        throw err;
      }
      if (input.offset + bytes.length <= size) return { size };
      const tail = bytes.subarray(size - input.offset);
      const newSize = size + tail.length;
      if (newSize > input.maxBytes) {
        throw new PayloadTooLargeError(
          `the log of this attempt reached its limit of ${describeBytes(input.maxBytes)}`,
        );
      }
      await checkJobQuota(
        tx,
        task.job_id,
        input.taskId,
        task.attempt,
        size,
        newSize,
        input.jobMaxBytes,
      );
      const masker = openMasker(keyring, task);
      const text = masker.empty
        ? tail.toString('utf8')
        : await maskAcrossChunks(
            tx,
            input.taskId,
            task.attempt,
            size,
            tail.toString('utf8'),
            masker,
          );
      await tx.query(
        `insert into log_chunks (task_id, attempt, byte_offset, size, data) values ($1, $2, $3, $4, $5)`,
        [input.taskId, task.attempt, size, tail.length, Buffer.from(text, 'utf8')],
      );
      await tx.query('update task_attempts set log_size = $3 where task_id = $1 and attempt = $2', [
        input.taskId,
        task.attempt,
        newSize,
      ]);
      return { size: newSize };
    },
    { keyedPlans: true },
  );
}

/**
 * Refuses the chunk (413) when it takes the attempt into a block of the
 * job's quota that the quota has no room for: the blocks every other attempt
 * of the job has entered (its log size rounded up to a block) and the blocks
 * this one would then hold must fit. Nothing is written, so the tasks of a job
 * that log at once never wait for each other. Measured: sixteen tasks of one
 * job appending at once through a per-job counter row, written in the append's
 * transaction, lost serialization races until the append gave up
 * (REPEATABLE READ); this read conflicts with nothing. Two attempts that enter
 * new blocks at the same moment do not see each other's: a job may pass its
 * quota by at most a block per such attempt.
 */
async function checkJobQuota(
  tx: Queryable,
  jobId: string,
  taskId: string,
  attempt: number,
  size: number,
  newSize: number,
  quota: number,
): Promise<void> {
  const block = logQuotaBlock(quota);
  const blocks = Math.ceil(newSize / block);
  if (blocks === Math.ceil(size / block)) return;
  const { rows } = await tx.query<{ held: string }>(
    `select coalesce(sum(ceil(a.log_size / $2::numeric)), 0) as held
       from tasks t join task_attempts a on a.task_id = t.id
      where t.job_id = $1 and not (a.task_id = $3 and a.attempt = $4)`,
    [jobId, block, taskId, attempt],
  );
  if ((Number(rows[0]!.held) + blocks) * block > quota) {
    throw new PayloadTooLargeError(
      `the logs of this job reached their quota of ${describeBytes(quota)} (CONDUCTOR_JOB_LOG_MAX_BYTES)`,
    );
  }
}

/**
 * The chunk's text masked together with the end of what is stored before
 * it, so that a value cut by chunk boundaries, over any number of chunks, is
 * masked once its last piece arrives. The stored chunks that hold the last
 * `longestBytes` bytes are read back (a masked form that ends in this chunk
 * starts in them at the latest); when masking changes any of them, each is cut
 * where the change starts (and the ones after it emptied), and the masked
 * text from there is stored with this chunk. Reads then answer the masked text
 * with the newest chunk, whose offset a reader following the log asks for.
 */
async function maskAcrossChunks(
  tx: Queryable,
  taskId: string,
  attempt: number,
  size: number,
  text: string,
  masker: Masker,
): Promise<string> {
  const { rows } = await tx.query<{ byte_offset: string; data: Buffer }>(
    `select byte_offset, data from log_chunks
      where task_id = $1 and attempt = $2 and byte_offset + size > $3
      order by byte_offset`,
    [taskId, attempt, size - masker.longestBytes + 1],
  );
  const texts = rows.map((r) => r.data.toString('utf8'));
  const stored = texts.join('');
  // Only the end of what is stored can start a form that ends in `text`.
  const from = Math.max(0, stored.length - masker.longestChars + 1);
  const joined = stored.slice(0, from) + masker.mask(stored.slice(from) + text);
  if (joined.startsWith(stored)) return joined.slice(stored.length);
  let cut = from;
  while (cut < stored.length && joined[cut] === stored[cut]) cut++;
  // Never between the halves of a surrogate pair.
  if (cut > 0 && /[\uD800-\uDBFF]/.test(stored[cut - 1]!)) cut--;
  const offsets: string[] = [];
  const datas: Buffer[] = [];
  let start = 0;
  for (const [i, row] of rows.entries()) {
    const end = start + texts[i]!.length;
    if (end > cut) {
      offsets.push(row.byte_offset);
      datas.push(Buffer.from(texts[i]!.slice(0, Math.max(0, cut - start)), 'utf8'));
    }
    start = end;
  }
  await tx.query(
    `update log_chunks c set data = v.data
       from unnest($3::bigint[], $4::bytea[]) as v (byte_offset, data)
      where c.task_id = $1 and c.attempt = $2 and c.byte_offset = v.byte_offset`,
    [taskId, attempt, offsets, datas],
  );
  return joined.slice(cut);
}

/** What the masking of a task's reports is built from: its job's trust, its secrets and the clone token, sealed. */
interface MaskSource {
  trusted: boolean;
  project_id: string;
  forge_token_enc: string | null;
  secret_encs: Array<{ name: string; value_enc: string }>;
}

// The columns of a MaskSource, for a query over tasks t join jobs j join
// projects p: one round trip gives the task and everything to mask with.
const MASK_SOURCE = `j.trusted, j.project_id, p.forge_token_enc,
  coalesce((select json_agg(json_build_object('name', s.name, 'value_enc', s.value_enc))
              from project_secrets s
             where s.project_id = j.project_id and s.name = any(t.secrets)), '[]') as secret_encs`;

/**
 * The Masker for what a task's runner reports: the secrets the task lists
 * and the project's forge token (the clone token), for trusted jobs; an
 * untrusted job is given neither, so has neither to leak. Throws
 * SecretDecryptError when a value cannot be opened.
 */
function openMasker(keyring: Keyring, src: MaskSource): Masker {
  if (!src.trusted) return new Masker([]);
  const values = src.secret_encs.map((s) =>
    decrypt(keyring, s.value_enc, sealContext.secret(src.project_id, s.name)),
  );
  const token = forgeToken(keyring, { id: src.project_id, forge_token_enc: src.forge_token_enc });
  return new Masker(token ? [...values, token] : values);
}

/** What a completion's error (or an output) is stored as when the secrets to mask it with cannot be opened. */
export const WITHHELD_ERROR = '[withheld: secrets could not be opened]';

export interface Report {
  outputs: Record<string, string>;
  error: string | null;
}

/**
 * A completion's outputs and error, checked against the task and masked, in
 * one read: an output the task does not declare is a 400 naming it, outputs
 * over their limit a 413 (lib/scheduler/complete.ts, checkOutputs); secret
 * values are masked in both, as in the log. When the secrets cannot be opened
 * (a key dropped from the keyring) the outcome is still recorded, with the
 * error and the output values withheld rather than stored as sent: refusing
 * the outcome would strand the task until its lease expired. Nothing is
 * read unless `workerId` holds the attempt under `leaseId` (the caller has
 * authenticated the worker): anyone else's report is answered 404, 409 or as
 * a repeat by the completion, which stores nothing of it, so it is neither
 * checked nor masked, and no secret is opened for it.
 */
export async function maskReport(
  db: Queryable,
  keyring: Keyring,
  at: { taskId: string; leaseId: string; workerId: string },
  report: Report,
): Promise<Report> {
  const hasOutputs = Object.keys(report.outputs).length > 0;
  if (!hasOutputs && !report.error) return report;
  const { rows } = await db.query<MaskSource & TaskOutputs>(
    `select t.name, t.outputs, ${MASK_SOURCE}
       from tasks t join jobs j on j.id = t.job_id join projects p on p.id = j.project_id
      where t.id = $1
        and exists (select 1 from task_attempts a
                     where a.lease_id = $2 and a.task_id = t.id and a.worker_id = $3)`,
    [at.taskId, at.leaseId, at.workerId],
  );
  const task = rows[0];
  if (!task) return report;
  checkOutputs(report.outputs, task);
  let masker: Masker;
  try {
    masker = openMasker(keyring, task);
  } catch (err) {
    if (!(err instanceof SecretDecryptError)) throw err;
    return {
      outputs: Object.fromEntries(Object.keys(report.outputs).map((n) => [n, WITHHELD_ERROR])),
      error: report.error === null ? null : WITHHELD_ERROR,
    };
  }
  return {
    outputs: Object.fromEntries(
      Object.entries(report.outputs).map(([name, value]) => [name, masker.mask(value)]),
    ),
    error: report.error === null ? null : masker.mask(report.error),
  };
}
