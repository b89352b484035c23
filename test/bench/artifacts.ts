// Artifacts through the local store (issue #37): a 100 MiB file uploaded
// through a signed PUT URL and downloaded through a signed GET URL of the
// local server's store, against a plain streamed copy of the same file on
// the same disk. Run alone: `node --import tsx test/bench/artifacts.ts`;
// `npm run bench` runs it too and notes the numbers.
import { randomBytes } from 'node:crypto';
import { createReadStream, createWriteStream } from 'node:fs';
import { mkdtemp, rm } from 'node:fs/promises';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { pipeline } from 'node:stream/promises';
import { BLOB_PATH, LocalStore } from '../../lib/storage/index.ts';
import { download, putParts } from '../../runner/artifacts.ts';

export interface ArtifactBench {
  mib: number;
  copyMiBs: number;
  uploadMiBs: number;
  downloadMiBs: number;
  /** Server process CPU (user + system) per MiB moved, ms: the streaming, not the control plane. */
  serveCpuMsPerMiB: number;
}

const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!;

/** Three rounds of copy, upload and download of a `mib` MiB file under `dir`; the medians. */
export async function artifactTransfer(dir: string, mib = 100, rounds = 3): Promise<ArtifactBench> {
  const work = await mkdtemp(join(dir, 'artifacts-bench-'));
  const source = join(work, 'source.bin');
  // Random bytes: nothing on the way can compress them.
  const chunk = randomBytes(1024 * 1024);
  const out = createWriteStream(source);
  for (let i = 0; i < mib; i++)
    if (!out.write(chunk)) await new Promise<void>((r) => out.once('drain', () => r()));
  await new Promise<void>((r) => out.end(r));
  const size = mib * 1024 * 1024;
  const store = new LocalStore(join(work, 'store'), randomBytes(32));
  const server = createServer((req, res) => {
    void store.serve(req, res, (req.url ?? '/').slice(BLOB_PATH.length));
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  const base = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  const copy: number[] = [];
  const up: number[] = [];
  const downs: number[] = [];
  const cpu: number[] = [];
  try {
    for (let round = 0; round < rounds; round++) {
      let t = performance.now();
      await pipeline(createReadStream(source), createWriteStream(join(work, `copy-${round}.bin`)));
      copy.push(mib / ((performance.now() - t) / 1000));

      const key = `artifacts/bench/${round}`;
      const plan = await store.partUrls(key, null, size, 60);
      const before = process.cpuUsage();
      t = performance.now();
      await putParts(
        base,
        source,
        { upload_id: null, parts: plan.parts },
        AbortSignal.timeout(120_000),
      );
      up.push(mib / ((performance.now() - t) / 1000));
      t = performance.now();
      const url = await store.downloadUrl(key, 'source.bin', 60);
      await download(base, url, join(work, `down-${round}.bin`), AbortSignal.timeout(120_000));
      downs.push(mib / ((performance.now() - t) / 1000));
      const used = process.cpuUsage(before);
      // Client and server share this process: half of it stands for the server's.
      cpu.push((used.user + used.system) / 1000 / 2 / (2 * mib));
      await rm(join(work, `copy-${round}.bin`));
      await rm(join(work, `down-${round}.bin`));
      await store.delete([key]);
    }
  } finally {
    await new Promise((r) => server.close(r));
    await rm(work, { recursive: true, force: true });
  }
  return {
    mib,
    copyMiBs: median(copy),
    uploadMiBs: median(up),
    downloadMiBs: median(downs),
    serveCpuMsPerMiB: median(cpu),
  };
}

/** One line for the report. */
export function describeArtifactBench(b: ArtifactBench): string {
  return `artifacts (issue #37): a ${b.mib} MiB file through the local store: upload ${b.uploadMiBs.toFixed(0)} MiB/s (${(b.uploadMiBs / b.copyMiBs).toFixed(2)}× a plain copy), download ${b.downloadMiBs.toFixed(0)} MiB/s (${(b.downloadMiBs / b.copyMiBs).toFixed(2)}×), plain copy ${b.copyMiBs.toFixed(0)} MiB/s; about ${b.serveCpuMsPerMiB.toFixed(2)} ms of CPU per MiB streamed.`;
}

if (import.meta.filename === process.argv[1]) {
  const b = await artifactTransfer(tmpdir());
  console.log(describeArtifactBench(b));
  console.log(JSON.stringify(b));
}
