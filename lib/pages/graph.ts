// The task graph of a job as SVG. Tasks are grouped by base name (a matrix's
// expansions stacked in one box under the task's key), and the groups are laid
// out left to right by dagre, a maintained layered-graph layout. A job's shape
// never changes once compiled, so a layout is kept, keyed by that shape, and
// every later view of the job (or of a rerun of the same pipeline) reuses it.
import dagre from '@dagrejs/dagre';
import type { TaskView } from '../scheduler/views.ts';
import { durationText, esc, Html } from './html.ts';

/** What the graph shows of a task. */
export type GraphTask = Pick<
  TaskView,
  | 'id'
  | 'name'
  | 'base_name'
  | 'matrix'
  | 'state'
  | 'needs'
  | 'attempt'
  | 'max_attempts'
  | 'allow_failure'
  | 'error'
  | 'started_at'
  | 'finished_at'
> & {
  queue_reason?: string | null;
  copied_from?: string | null;
  block?: { prompt: string } | null;
  unblocked_by?: string | null;
};

const NODE_W = 236;
const NODE_H = 58;
const GAP = 8;
const HEAD = 26;
const PAD = 8;
const CHARS = 31;
// dagre's ordering and positioning grow fast with the number of nodes (about
// a second for 1,000 on this machine); past this many groups, each group's
// column is its longest path from a source, in pipeline order, computed here.
export const DAGRE_MAX_GROUPS = 60;

/** The second and third line of a task's box: its state, time and attempt; why it is as it is. */
export function taskLines(task: GraphTask, now = Date.now()): { status: string; note: string } {
  const duration = durationText(task.started_at, task.finished_at, now);
  const status = [
    task.state,
    duration,
    task.attempt > 1 ? `attempt ${task.attempt}/${task.max_attempts}` : '',
  ]
    .filter(Boolean)
    .join(' · ');
  const why =
    task.state === 'queued'
      ? task.queue_reason
      : task.state === 'blocked'
        ? `waiting for approval: ${task.block?.prompt ?? ''}`
        : task.state === 'success' && task.unblocked_by
          ? `unblocked by ${task.unblocked_by}`
          : task.state === 'success' || task.state === 'running'
            ? null
            : task.error;
  const note = [
    task.allow_failure ? 'allowed to fail' : '',
    task.copied_from ? 'kept from the earlier job' : '',
    why ?? '',
  ]
    .filter(Boolean)
    .join(' · ');
  return { status, note };
}

interface Group {
  key: string;
  tasks: GraphTask[];
  matrix: boolean;
  w: number;
  h: number;
}

interface Layout {
  width: number;
  height: number;
  /** Top-left corner of each group, by base name. */
  at: Map<string, { x: number; y: number }>;
  /** dagre's route of each edge (border to border, around the boxes); none from the columns. */
  edges: { from: string; to: string; points?: { x: number; y: number }[] }[];
}

const layouts = new Map<string, Layout>();
const MAX_LAYOUTS = 200;

function groupsOf(tasks: GraphTask[]): { groups: Group[]; edges: [string, string][] } {
  const byKey = new Map<string, Group>();
  const baseOf = new Map<string, string>();
  for (const task of tasks) {
    baseOf.set(task.name, task.base_name);
    let group = byKey.get(task.base_name);
    if (!group) {
      group = { key: task.base_name, tasks: [], matrix: false, w: 0, h: 0 };
      byKey.set(task.base_name, group);
    }
    group.tasks.push(task);
    if (Object.keys(task.matrix ?? {}).length > 0) group.matrix = true;
  }
  for (const g of byKey.values()) {
    if (g.matrix || g.tasks.length > 1) {
      g.matrix = true;
      g.w = NODE_W + 2 * PAD;
      g.h = HEAD + g.tasks.length * (NODE_H + GAP) - GAP + PAD;
    } else {
      g.w = NODE_W;
      g.h = NODE_H;
    }
  }
  const seen = new Set<string>();
  const edges: [string, string][] = [];
  for (const task of tasks) {
    for (const need of task.needs) {
      const from = baseOf.get(need);
      const key = `${from}\0${task.base_name}`;
      if (from === undefined || from === task.base_name || seen.has(key)) continue;
      seen.add(key);
      edges.push([from, task.base_name]);
    }
  }
  return { groups: [...byKey.values()], edges };
}

function layoutWithDagre(groups: Group[], edges: [string, string][]): Layout {
  const g = new dagre.graphlib.Graph();
  g.setGraph({ rankdir: 'LR', nodesep: 18, ranksep: 56, marginx: 12, marginy: 12 });
  g.setDefaultEdgeLabel(() => ({}));
  for (const group of groups) g.setNode(group.key, { width: group.w, height: group.h });
  for (const [from, to] of edges) g.setEdge(from, to);
  dagre.layout(g);
  const boxes = groups.map((group) => {
    const n = g.node(group.key) as { x: number; y: number };
    return { key: group.key, x: n.x - group.w / 2, y: n.y - group.h / 2, w: group.w, h: group.h };
  });
  const routes = edges.map(([from, to]) => ({
    from,
    to,
    points: ((g.edge(from, to) as { points?: { x: number; y: number }[] }).points ?? []).map(
      (p) => ({ x: p.x, y: p.y }),
    ),
  }));
  // A curve may bend past the margin dagre leaves: fit the drawing to all of it.
  const xs = [
    ...boxes.flatMap((b) => [b.x, b.x + b.w]),
    ...routes.flatMap((e) => e.points.map((p) => p.x)),
  ];
  const ys = [
    ...boxes.flatMap((b) => [b.y, b.y + b.h]),
    ...routes.flatMap((e) => e.points.map((p) => p.y)),
  ];
  const dx = 12 - Math.min(...xs);
  const dy = 12 - Math.min(...ys);
  const at = new Map(boxes.map((b) => [b.key, { x: b.x + dx, y: b.y + dy }]));
  return {
    width: Math.ceil(Math.max(...xs) + dx + 12),
    height: Math.ceil(Math.max(...ys) + dy + 12),
    at,
    edges: routes.map((e) => ({
      ...e,
      points: e.points.map((p) => ({ x: p.x + dx, y: p.y + dy })),
    })),
  };
}

/** Columns by longest path from a source, groups in pipeline order within a column. */
function layoutByColumns(groups: Group[], edges: [string, string][]): Layout {
  const incoming = new Map<string, string[]>(groups.map((g) => [g.key, []]));
  for (const [from, to] of edges) incoming.get(to)!.push(from);
  const column = new Map<string, number>();
  // A file may list a task before what it needs: columns are found by walking
  // needs (the compiler refused cycles; the depth bound only guards that).
  const visit = (key: string, depth: number): number => {
    const known = column.get(key);
    if (known !== undefined) return known;
    if (depth > groups.length) return 0;
    const c = Math.max(-1, ...incoming.get(key)!.map((k) => visit(k, depth + 1))) + 1;
    column.set(key, c);
    return c;
  };
  for (const g of groups) visit(g.key, 0);
  const at = new Map<string, { x: number; y: number }>();
  const heights: number[] = [];
  let width = 0;
  for (const g of groups) {
    const c = column.get(g.key)!;
    const x = 12 + c * (NODE_W + 2 * PAD + 56);
    const y = heights[c] ?? 12;
    at.set(g.key, { x, y });
    heights[c] = y + g.h + 18;
    width = Math.max(width, x + g.w + 12);
  }
  return {
    width,
    height: Math.max(0, ...heights),
    at,
    edges: edges.map(([from, to]) => ({ from, to })),
  };
}

function layoutOf(groups: Group[], edges: [string, string][]): Layout {
  const key = JSON.stringify([groups.map((g) => [g.key, g.tasks.length, g.matrix]), edges]);
  const cached = layouts.get(key);
  if (cached) {
    // Most recently used last, so the oldest goes first when full.
    layouts.delete(key);
    layouts.set(key, cached);
    return cached;
  }
  const layout =
    groups.length <= DAGRE_MAX_GROUPS
      ? layoutWithDagre(groups, edges)
      : layoutByColumns(groups, edges);
  layouts.set(key, layout);
  if (layouts.size > MAX_LAYOUTS) layouts.delete(layouts.keys().next().value!);
  return layout;
}

/** Forgets every layout kept (the benchmark measures a first view with it). */
export function clearLayouts(): void {
  layouts.clear();
}

function clip(text: string, chars = CHARS): string {
  return text.length > chars ? `${text.slice(0, chars - 1)}…` : text;
}

// The expansion's values as its name shows them, in the order the pipeline
// wrote its keys: the stored matrix is jsonb, which keeps keys in its own
// order (shortest first), so it would say `os: linux, node: 20` for the task
// named `test (node: 20, os: linux)`.
function matrixLabel(task: GraphTask): string {
  const prefix = `${task.base_name} (`;
  if (task.name.startsWith(prefix) && task.name.endsWith(')')) {
    return task.name.slice(prefix.length, -1);
  }
  const values = Object.entries(task.matrix ?? {}).map(([k, v]) => `${k}: ${v}`);
  return values.length ? values.join(', ') : task.name;
}

function edgePath(
  layout: Layout,
  groups: Map<string, Group>,
  edge: Layout['edges'][number],
): string {
  const a = layout.at.get(edge.from)!;
  const b = layout.at.get(edge.to)!;
  const ga = groups.get(edge.from)!;
  const gb = groups.get(edge.to)!;
  const start = { x: a.x + ga.w, y: a.y + ga.h / 2 };
  const end = { x: b.x, y: b.y + gb.h / 2 };
  const points = edge.points;
  if (points && points.length >= 2) {
    // Through dagre's points, each corner rounded by a quadratic curve.
    let d = `M${r(points[0]!.x)},${r(points[0]!.y)}`;
    for (let i = 1; i < points.length - 1; i++) {
      const p = points[i]!;
      const q = points[i + 1]!;
      d += `Q${r(p.x)},${r(p.y)} ${r((p.x + q.x) / 2)},${r((p.y + q.y) / 2)}`;
    }
    const last = points[points.length - 1]!;
    return `${d}L${r(last.x)},${r(last.y)}`;
  }
  const mx = (start.x + end.x) / 2;
  return `M${r(start.x)},${r(start.y)}C${r(mx)},${r(start.y)} ${r(mx)},${r(end.y)} ${r(end.x)},${r(end.y)}`;
}

const r = (n: number) => Math.round(n);

/**
 * The graph as an <svg>: each task an <a> with `data-task-name` and
 * `data-state` that opens its log (`href(task)`); `open` is the task shown.
 */
export function renderGraph(
  tasks: GraphTask[],
  opts: {
    href: (task: GraphTask) => string;
    open?: string;
    now?: number;
    /** A short text at the right of a task's name: its tests (lib/pages/tests.ts). */
    badge?: (task: GraphTask) => string | undefined;
  },
): Html {
  if (tasks.length === 0) return new Html('');
  const now = opts.now ?? Date.now();
  const { groups, edges } = groupsOf(tasks);
  const layout = layoutOf(groups, edges);
  const byKey = new Map(groups.map((g) => [g.key, g]));
  const out: string[] = [];
  out.push(
    `<svg xmlns="http://www.w3.org/2000/svg" width="${layout.width}" height="${layout.height}" viewBox="0 0 ${layout.width} ${layout.height}" role="group" aria-label="task graph">`,
  );
  out.push(
    '<defs><marker id="arrow" viewBox="0 0 8 8" refX="7" refY="4" markerWidth="7" markerHeight="7" orient="auto"><path d="M0,0L8,4L0,8z" fill="currentColor"/></marker></defs><g class="edges" style="color:var(--off)">',
  );
  for (const edge of layout.edges) {
    out.push(`<path class="edge" marker-end="url(#arrow)" d="${edgePath(layout, byKey, edge)}"/>`);
  }
  out.push('</g>');
  for (const group of groups) {
    const { x, y } = layout.at.get(group.key)!;
    if (group.matrix) {
      out.push(
        `<g class="group"><rect x="${r(x)}" y="${r(y)}" width="${group.w}" height="${group.h}" rx="8"/><text x="${r(x + PAD)}" y="${r(y + 17)}">${esc(clip(group.key))}<title>${esc(group.key)}</title></text>`,
      );
      group.tasks.forEach((task, i) => {
        out.push(node(task, x + PAD, y + HEAD + i * (NODE_H + GAP), matrixLabel(task), opts, now));
      });
      out.push('</g>');
    } else {
      out.push(node(group.tasks[0]!, x, y, group.tasks[0]!.name, opts, now));
    }
  }
  out.push('</svg>');
  return new Html(out.join(''));
}

function node(
  task: GraphTask,
  x: number,
  y: number,
  label: string,
  opts: {
    href: (task: GraphTask) => string;
    open?: string;
    badge?: (task: GraphTask) => string | undefined;
  },
  now: number,
): string {
  const { status, note } = taskLines(task, now);
  const open = task.id === opts.open ? ' open' : '';
  const badge = opts.badge?.(task);
  const shownLabel = clip(label, badge ? CHARS - badge.length - 1 : CHARS);
  const shownStatus = clip(status, CHARS + 4);
  const shownNote = clip(note, CHARS + 4);
  // A tooltip only where the box cut something short (or shows a matrix
  // expansion by its values alone): a thousand tasks make the page heavy.
  const tip =
    shownLabel !== task.name || shownStatus !== status || shownNote !== note
      ? `<title>${esc([task.name, status, note].filter(Boolean).join('\n'))}</title>`
      : '';
  const x0 = r(x);
  const y0 = r(y);
  return `<a class="node${open}" href="${esc(opts.href(task))}" data-task-name="${esc(task.name)}" data-state="${task.state}" data-task-id="${task.id}">${tip}<rect x="${x0}" y="${y0}" width="${NODE_W}" height="${NODE_H}" rx="6"/><rect class="bar" x="${x0}" y="${y0}" width="5" height="${NODE_H}" rx="2"/><text x="${x0 + 13}" y="${y0 + 18}">${esc(shownLabel)}</text>${badge ? `<text class="sub tests" x="${x0 + NODE_W - 8}" y="${y0 + 18}" text-anchor="end" data-tests>${esc(badge)}</text>` : ''}<text class="sub st" x="${x0 + 13}" y="${y0 + 35}">${esc(shownStatus)}</text><text class="sub note" x="${x0 + 13}" y="${y0 + 51}">${esc(shownNote)}</text></a>`;
}
