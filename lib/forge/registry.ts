// Every forge Conductor speaks, by the name a project's `forge` holds.
import type { Forge, ForgeKind } from './forge.ts';
import { gitea } from './gitea/index.ts';
import { github } from './github/index.ts';
import { gitlab } from './gitlab/index.ts';

const FORGE_MODULES: Readonly<Record<ForgeKind, Forge>> = { github, gitea, gitlab };

/** The forge a project's `forge` names. */
export function forgeOf(kind: ForgeKind): Forge {
  return FORGE_MODULES[kind];
}

/** The forge a string names (a route, a cookie), or undefined when it names none. */
export function findForge(name: string): Forge | undefined {
  return Object.hasOwn(FORGE_MODULES, name) ? FORGE_MODULES[name as ForgeKind] : undefined;
}

/** `GitHub`, `Gitea`, `GitLab`, for messages. */
export function forgeName(kind: ForgeKind): string {
  return FORGE_MODULES[kind].title;
}
