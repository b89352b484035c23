// What the end-to-end tests send besides the forges' payloads (those are
// test/forge/fixtures/github.ts and gitea.ts): commit shas, pipelines.
import { createHash } from 'node:crypto';

export type Forge = 'github' | 'gitea';

/** A commit sha that looks like a real one and is the same for the same seed. */
export function sha(seed: string): string {
  return createHash('sha1').update(seed).digest('hex');
}

export const ZERO_SHA = '0'.repeat(40);

/**
 * A pipeline whose every task carries `label` (through defaults), so only a
 * worker registered with that label can claim it: tests of one file share a
 * database and must not take each other's tasks.
 */
export function pipeline(label: string, tasks: string): string {
  return `version: 1
name: e2e
defaults:
  labels: [${label}]
tasks:
${tasks}`;
}
