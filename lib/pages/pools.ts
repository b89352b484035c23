// The runner pools on a project's page (issue #51): which pools launch
// runners for its tasks, with their labels, trust, provider, maximum and the
// runners they have now. Shown where the workers are, to the same viewers.
import type { Queryable } from '../db/index.ts';
import { listPoolViews } from '../fleet/pools.ts';
import { type Html, html } from './html.ts';

/** The pools that serve `projectId` (every project's, or its own), as a section of its page; empty without any. */
export async function poolsFor(db: Queryable, projectId: string): Promise<Html> {
  const pools = (await listPoolViews(db)).filter(
    (p) => p.projects === '*' || p.projects.includes(projectId),
  );
  if (pools.length === 0) return html``;
  const lines = pools.map(
    (p) =>
      html`<tr data-pool="${p.name}"><td>${p.name}</td><td data-labels>${p.labels.length > 0 ? p.labels.join(', ') : 'none'}</td><td data-trust>${p.trust}</td><td data-provider>${p.provider}</td><td data-scope>${p.projects === '*' ? 'every project' : p.projects.length === 1 ? 'this project only' : `${p.projects.length} projects`}</td><td data-max>${p.max}</td><td data-starting>${p.runners.starting}</td><td data-running>${p.runners.running}</td></tr>`,
  );
  return html`<h2>Runner pools</h2><p class="muted">A pool starts a runner for each task it serves that no idle runner can take, up to its maximum, and none while nothing waits.</p><div class="scroll"><table><thead><tr><th>pool</th><th>labels</th><th>trust</th><th>provider</th><th>serves</th><th>max</th><th>starting</th><th>running</th></tr></thead><tbody>${lines}</tbody></table></div>`;
}
