// `include:` reads more YAML files from the same commit. The compiler stays pure: it names the
// files it still needs (`toRead`), its caller reads them at the job's commit, outside any
// transaction, and compiles again with them (lib/app/compile.ts). Each round reads every file
// it is given again, so a compile is the same function of its files however many rounds it took.
import { LineCounter } from 'yaml';
import type { IssueList, PathSegment } from './issues.ts';
import {
  describeBytes,
  MAX_INCLUDE_DEPTH,
  MAX_INCLUDE_PATH_CHARS,
  MAX_INCLUDED_FILES,
  MAX_PIPELINE_BYTES,
  PIPELINE_FILE,
} from './limits.ts';
import { describeValue, quote } from './messages.ts';
import { type AliasBudget, isPlainMap, type Loc, readSource, type Source } from './source.ts';

/** An included file as its caller read it: its text, or why it could not be read. */
export type IncludedFile = { text: string } | { error: string };

/** The included files read so far, by their path from the repository root. */
export type IncludedFiles = ReadonlyMap<string, IncludedFile>;

/** An included file that was read and parsed. */
export interface ReadFile {
  path: string;
  source: Source;
}

/** What the include step found: the files read, in include order, and those still to read. */
export interface Includes {
  files: ReadFile[];
  toRead: string[];
  /** An included file's YAML is broken (its problems are reported). */
  broken: boolean;
}

/**
 * The path an `include:` item names, from the repository root: `ci/test.yml`, `./ci/x.yml` and
 * `ci/a/../x.yml` are the same file. Nothing outside the commit can be named: not a URL, not an
 * absolute path, not a path whose `..` climbs out of the repository.
 */
export function includePath(raw: string): { path: string } | { error: string } {
  if (raw.length === 0) return { error: 'must not be empty' };
  if (raw.length > MAX_INCLUDE_PATH_CHARS) {
    return { error: `must be at most ${MAX_INCLUDE_PATH_CHARS} characters` };
  }
  if (raw.includes('://')) {
    return { error: `${quote(raw)} is a URL; include reads files of the same commit only` };
  }
  if (raw.startsWith('/')) {
    return { error: `${quote(raw)} starts with /; write the path from the repository root` };
  }
  if (/[\\\p{Cc}]/u.test(raw)) {
    return { error: `${quote(raw)} holds a backslash or a control character` };
  }
  const parts: string[] = [];
  for (const part of raw.split('/')) {
    if (part === '' || part === '.') continue;
    if (part !== '..') {
      parts.push(part);
    } else if (parts.pop() === undefined) {
      return { error: `${quote(raw)} leaves the repository` };
    }
  }
  const path = parts.join('/');
  if (!/\.ya?ml$/.test(path)) return { error: `${quote(raw)} is not a .yml or .yaml file` };
  return { path };
}

/**
 * Reads the files the pipeline file includes, and those they include, depth first in the order
 * written. A file named again is read once (a diamond is fine); a file that includes one of
 * its own includers is a cycle. Problems are reported at the `include:` item that names the
 * file, or inside the file itself.
 */
export function readIncludes(
  main: Source,
  given: IncludedFiles,
  issues: IssueList,
  budget: AliasBudget,
): Includes {
  const found: Includes = { files: [], toRead: [], broken: false };
  const seen = new Set<string>([PIPELINE_FILE]);
  const visit = (source: Source, chain: string[]) => {
    const value = source.value;
    const loc = source.loc.entries?.get('include');
    if (!isPlainMap(value) || value.include === undefined || !loc) return;
    const raw = value.include;
    const items = typeof raw === 'string' ? [raw] : raw;
    if (!Array.isArray(items)) {
      issues.add(
        loc.offset,
        ['include'],
        `expected a path or a list of paths, got ${describeValue(raw)}`,
      );
      return;
    }
    items.forEach((item, i) => {
      const itemLoc: Loc = typeof raw === 'string' ? loc : (loc.items?.[i] ?? loc);
      const path: PathSegment[] = typeof raw === 'string' ? ['include'] : ['include', i];
      if (typeof item !== 'string') {
        issues.add(itemLoc.offset, path, `expected a path, got ${describeValue(item)}`);
        return;
      }
      const named = includePath(item);
      if ('error' in named) {
        issues.add(itemLoc.offset, path, named.error);
        return;
      }
      const file = named.path;
      if (chain.includes(file)) {
        issues.add(itemLoc.offset, path, `include cycle: ${[...chain, file].join(' → ')}`);
        return;
      }
      if (seen.has(file)) return;
      if (chain.length > MAX_INCLUDE_DEPTH) {
        issues.add(
          itemLoc.offset,
          path,
          `includes nest more than ${MAX_INCLUDE_DEPTH} deep: ${[...chain, file].join(' → ')}`,
        );
        return;
      }
      if (seen.size > MAX_INCLUDED_FILES) {
        issues.add(
          itemLoc.offset,
          path,
          `${quote(file)} would be included file number ${seen.size}; at most ${MAX_INCLUDED_FILES} files may be included`,
        );
        return;
      }
      seen.add(file);
      const read = given.get(file);
      if (read === undefined) {
        found.toRead.push(file);
        return;
      }
      if ('error' in read) {
        issues.add(itemLoc.offset, path, read.error);
        return;
      }
      const bytes = Buffer.byteLength(read.text, 'utf8');
      if (bytes > MAX_PIPELINE_BYTES) {
        // Reported in the file itself, as the pipeline file's own size is, without parsing it.
        const { base } = issues.addFile(file, 0, new LineCounter());
        issues.add(
          base,
          [],
          `the file is ${bytes} bytes; at most ${describeBytes(MAX_PIPELINE_BYTES)} are allowed`,
        );
        return;
      }
      const source = readSource(read.text, { issues, name: file, budget });
      if (!source.ok) {
        found.broken = true;
        return;
      }
      if (source.empty) {
        issues.add(source.loc.offset, [], 'the file is empty; an included file needs tasks');
        return;
      }
      found.files.push({ path: file, source });
      visit(source, [...chain, file]);
    });
  };
  visit(main, [PIPELINE_FILE]);
  return found;
}
