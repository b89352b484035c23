/** A dependency graph: each node maps to the nodes it needs. */
export type Graph = ReadonlyMap<string, readonly string[]>;

/**
 * Finds one cycle through every group of nodes that need each other in a circle (a strongly
 * connected component of more than one node), as `[a, b, c, a]` where a needs b needs c needs a.
 * Each cycle starts at the group's first node in `order`, so a cycle is reported once, not once per
 * member. Self-needs are not edges here; they are reported on their own.
 */
export function findCycles(order: readonly string[], graph: Graph): string[][] {
  const rank = new Map(order.map((node, i) => [node, i]));
  const cycles: string[][] = [];
  for (const component of components(order, graph)) {
    if (component.length < 2) continue;
    const members = new Set(component);
    let start = component[0] ?? '';
    for (const node of component) {
      if ((rank.get(node) ?? 0) < (rank.get(start) ?? 0)) start = node;
    }
    cycles.push(shortestCycle(start, members, graph));
  }
  return cycles.sort((a, b) => (rank.get(a[0] ?? '') ?? 0) - (rank.get(b[0] ?? '') ?? 0));
}

// Tarjan's algorithm, iterative so a chain of thousands of tasks cannot overflow the stack.
function components(order: readonly string[], graph: Graph): string[][] {
  const index = new Map<string, number>();
  const low = new Map<string, number>();
  const onStack = new Set<string>();
  const stack: string[] = [];
  const found: string[][] = [];
  let counter = 0;
  for (const root of order) {
    if (index.has(root)) continue;
    const work: Array<{ node: string; next: number }> = [{ node: root, next: 0 }];
    index.set(root, counter);
    low.set(root, counter++);
    stack.push(root);
    onStack.add(root);
    while (work.length > 0) {
      const frame = work[work.length - 1];
      if (frame === undefined) break;
      const edges = graph.get(frame.node) ?? [];
      const target = edges[frame.next++];
      if (target !== undefined) {
        if (!index.has(target)) {
          index.set(target, counter);
          low.set(target, counter++);
          stack.push(target);
          onStack.add(target);
          work.push({ node: target, next: 0 });
        } else if (onStack.has(target)) {
          low.set(frame.node, Math.min(low.get(frame.node) ?? 0, index.get(target) ?? 0));
        }
        continue;
      }
      work.pop();
      const parent = work[work.length - 1];
      if (parent !== undefined) {
        low.set(parent.node, Math.min(low.get(parent.node) ?? 0, low.get(frame.node) ?? 0));
      }
      if (low.get(frame.node) === index.get(frame.node)) {
        const component: string[] = [];
        let member: string | undefined;
        do {
          member = stack.pop();
          if (member === undefined) break;
          onStack.delete(member);
          component.push(member);
        } while (member !== frame.node);
        found.push(component);
      }
    }
  }
  return found;
}

// Breadth-first from start within its component, so the cycle named is a shortest one.
function shortestCycle(start: string, members: ReadonlySet<string>, graph: Graph): string[] {
  const parent = new Map<string, string>();
  const queue = [start];
  for (let head = 0; head < queue.length; head++) {
    const node = queue[head] ?? start;
    for (const next of graph.get(node) ?? []) {
      if (!members.has(next)) continue;
      if (next === start) {
        const path = [node];
        for (let at = node; at !== start; ) {
          at = parent.get(at) ?? start;
          path.push(at);
        }
        return [...path.reverse(), start];
      }
      if (!parent.has(next)) {
        parent.set(next, node);
        queue.push(next);
      }
    }
  }
  return [start, start];
}

/** The given nodes together with every node that needs one of them, directly or transitively. */
export function withDependents(seeds: Iterable<string>, graph: Graph): Set<string> {
  const dependents = new Map<string, string[]>();
  for (const [node, needs] of graph) {
    for (const need of needs) {
      const list = dependents.get(need);
      if (list) list.push(node);
      else dependents.set(need, [node]);
    }
  }
  const out = new Set(seeds);
  const queue = [...out];
  for (let head = 0; head < queue.length; head++) {
    for (const dependent of dependents.get(queue[head] ?? '') ?? []) {
      if (!out.has(dependent)) {
        out.add(dependent);
        queue.push(dependent);
      }
    }
  }
  return out;
}
