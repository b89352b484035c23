import { z } from 'zod';
import { type Pool, type Queryable, transaction } from '../db/index.ts';
import { NotFoundError } from '../errors.ts';
import { hashToken, newToken } from '../http/auth.ts';

export const LABEL = /^[A-Za-z0-9][A-Za-z0-9_.:-]{0,62}$/;

export const WorkerCreateSchema = z.strictObject({
  name: z.string().trim().min(1).max(200),
  labels: z
    .array(z.string().regex(LABEL, 'labels are letters, digits and _ . : -, up to 63'))
    .max(50)
    .default([]),
  // Untrusted workers claim only untrusted tasks (pull requests from forks and
  // the like); every other worker claims only trusted ones.
  untrusted: z.boolean().default(false),
});
export type WorkerCreate = z.infer<typeof WorkerCreateSchema>;

export interface WorkerView {
  id: string;
  name: string;
  labels: string[];
  /** Claims only untrusted tasks when true, only trusted ones when false. */
  untrusted: boolean;
  created_at: Date;
  last_seen_at: Date | null;
  revoked: boolean;
}

const COLUMNS = 'id, name, labels, untrusted, created_at, last_seen_at, revoked';

/** Registers a worker; its token is answered once and only its hash is kept. */
export async function createWorker(
  pool: Pool,
  input: WorkerCreate,
): Promise<{ worker: WorkerView; token: string }> {
  const token = newToken('cw');
  const labels = [...new Set(input.labels)].sort();
  const worker = await transaction(pool, async (tx) => {
    const { rows } = await tx.query<WorkerView>(
      `insert into workers (name, token_hash, labels, untrusted) values ($1, $2, $3, $4)
       returning ${COLUMNS}`,
      [input.name, hashToken(token), labels, input.untrusted],
    );
    return rows[0]!;
  });
  return { worker, token };
}

/** Every worker, newest first, revoked ones included. */
export async function listWorkers(db: Queryable): Promise<WorkerView[]> {
  const { rows } = await db.query<WorkerView>(
    `select ${COLUMNS} from workers order by created_at desc, id`,
  );
  return rows;
}

/** Revokes a worker: its token stops working at once; the row stays for the history. */
export async function revokeWorker(pool: Pool, id: string): Promise<void> {
  const found = await transaction(pool, async (tx) => {
    const { rowCount } = await tx.query('update workers set revoked = true where id = $1', [id]);
    return rowCount === 1;
  });
  if (!found) throw new NotFoundError(`worker ${id} does not exist`);
}
