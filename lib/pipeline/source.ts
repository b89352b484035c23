import {
  type Alias,
  Composer,
  type CST,
  type Document,
  isAlias,
  isMap,
  isPair,
  isScalar,
  isSeq,
  Lexer,
  LineCounter,
  Parser,
} from 'yaml';
import { IssueList, type PathSegment } from './issues.ts';
import { describeBytes, MAX_ALIASED_BYTES, MAX_ALIASED_VALUES } from './limits.ts';
import { quote } from './messages.ts';

/** A YAML value as plain data: maps are null-prototype objects, so no key can reach a prototype. */
export type Plain = string | number | boolean | null | Plain[] | PlainMap;
export interface PlainMap {
  [key: string]: Plain;
}

/** Where a converted value came from; mirrors the value's shape so any path can be located. */
export interface Loc {
  /** Source offset of the value (of the alias, when it came through one). */
  offset: number;
  /** Source offset of the key that holds the value, or of the value when it has no key. */
  keyOffset: number;
  /** The source text of a scalar that did not resolve to a string, to stringify it as written. */
  text: string | null;
  entries: Map<string, Loc> | null;
  items: Loc[] | null;
}

/** A pipeline file read into plain data, or the YAML errors that stopped it. */
export interface Source {
  /** False when the YAML itself is broken: nothing past the syntax errors can be trusted. */
  ok: boolean;
  /** True when the file holds no YAML node at all (blank or only comments). */
  empty: boolean;
  value: Plain;
  loc: Loc;
  issues: IssueList;
}

// No valid pipeline nests deeper than 5 levels, so 32 only ever stops abuse. It also keeps yaml's
// recursive composer far from the stack limit: near it, V8 was seen to abort the whole process
// ("RegExpCompiler Allocation failed") instead of throwing a RangeError we could catch.
const MAX_DEPTH = 32;

// yaml's parser stack holds the document and the token being read on top of the open collections.
const MAX_PARSER_STACK = MAX_DEPTH + 3;

/** Tests for a converted YAML map. */
export function isPlainMap(value: unknown): value is PlainMap {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}

/**
 * What aliases may still copy in one compile: shared by every file it reads, so twenty included
 * files cannot each spend the limits of one.
 */
export class AliasBudget {
  values = 0;
  bytes = 0;
}

export interface ReadOptions {
  /** The compile's issues, when this file is one of several (`include:`); else a list of its own. */
  issues?: IssueList;
  /** The included file's path; absent for the pipeline file. */
  name?: string;
  budget?: AliasBudget;
}

/**
 * Parses YAML text into plain data plus locations, reporting YAML errors with their positions.
 * Every offset it keeps is past the offsets of the files read before it into the same issues.
 */
export function readSource(text: string, options: ReadOptions = {}): Source {
  const lines = new LineCounter();
  const issues = options.issues ?? new IssueList();
  const { base } = issues.addFile(options.name ?? null, text.length, lines);
  const broken: Source = {
    ok: false,
    empty: false,
    value: null,
    loc: { offset: base, keyOffset: base, text: null, entries: null, items: null },
    issues,
  };
  let doc: Document.Parsed | undefined;
  try {
    const tokens = parseTokens(text, lines);
    if (typeof tokens === 'number') {
      issues.add(base + tokens, [], `nested more than ${MAX_DEPTH} levels deep`);
      return broken;
    }
    // Duplicate keys are reported by the converter, which knows the path of their map.
    const composer = new Composer({ merge: true, uniqueKeys: false });
    for (const next of composer.compose(tokens, true, text.length)) {
      if (doc === undefined) {
        doc = next;
      } else {
        issues.add(
          base + next.range[0],
          [],
          'invalid YAML: the file must hold a single YAML document',
        );
        return broken;
      }
    }
  } catch (error) {
    const reason = error instanceof Error ? error.message : 'unknown error';
    issues.add(base, [], `could not parse the YAML: ${reason}`);
    return broken;
  }
  if (doc === undefined) return { ...broken, ok: true, empty: true };
  if (doc.errors.length > 0) {
    for (const error of doc.errors) {
      issues.add(base + error.pos[0], [], `invalid YAML: ${error.message}`);
    }
    return broken;
  }
  const converter = new Converter(
    anchorTargets(doc.contents),
    issues,
    base,
    options.budget ?? new AliasBudget(),
  );
  const [value, loc] = converter.convert(doc.contents, base, [], 0, false);
  if (converter.broken) return broken;
  return { ok: true, empty: doc.contents === null, value, loc, issues };
}

// Runs yaml's lexer and parser (both iterative) by hand so nesting can be bounded before the
// recursive composer sees it; returns the offset where nesting got too deep instead of tokens.
function parseTokens(text: string, lines: LineCounter): CST.Token[] | number {
  const parser = new Parser(lines.addNewLine);
  // Parser.parse() registers the first line itself; driving next() by hand, we must.
  lines.addNewLine(0);
  const tokens: CST.Token[] = [];
  for (const lexeme of new Lexer().lex(text)) {
    for (const token of parser.next(lexeme)) tokens.push(token);
    if (parser.stack.length > MAX_PARSER_STACK) return parser.offset;
  }
  for (const token of parser.end()) tokens.push(token);
  return tokens;
}

/** The offset to point at for a path: its key or value, or the deepest node on the way that exists. */
export function locate(root: Loc, path: readonly PathSegment[], target: 'key' | 'value'): number {
  let loc = root;
  for (const segment of path) {
    const next = child(loc, segment);
    // A missing key is reported on the map that lacks it.
    if (next === null) return loc.offset;
    loc = next;
  }
  return target === 'key' ? loc.keyOffset : loc.offset;
}

/** The location of the value at a path, or null if the path leaves the document. */
export function locAt(root: Loc, path: readonly PathSegment[]): Loc | null {
  let loc: Loc | null = root;
  for (const segment of path) {
    if (loc === null) return null;
    loc = child(loc, segment);
  }
  return loc;
}

function child(loc: Loc, segment: PathSegment): Loc | null {
  if (typeof segment === 'number') return loc.items?.[segment] ?? null;
  return loc.entries?.get(segment) ?? null;
}

/** Stringifies a scalar as the user wrote it, so `3.10` stays `3.10` and `True` stays `True`. */
export function asWritten(value: Plain, loc: Loc | null): string {
  if (typeof value === 'string') return value;
  return loc?.text ?? String(value);
}

// Resolves every alias to the node it names in one pass: yaml's Alias.resolve walks the whole
// document on each call, which a file full of aliases turns quadratic.
function anchorTargets(root: unknown): Map<Alias, unknown> {
  const targets = new Map<Alias, unknown>();
  const anchors = new Map<string, unknown>();
  const stack: unknown[] = [root];
  while (stack.length > 0) {
    const node = stack.pop();
    if (isAlias(node)) {
      if (anchors.has(node.source)) targets.set(node, anchors.get(node.source));
      continue;
    }
    if ((isScalar(node) || isMap(node) || isSeq(node)) && node.anchor)
      anchors.set(node.anchor, node);
    if (isPair(node)) {
      stack.push(node.value, node.key);
    } else if (isMap(node) || isSeq(node)) {
      for (let i = node.items.length - 1; i >= 0; i--) stack.push(node.items[i]);
    }
  }
  return targets;
}

type Converted = [Plain, Loc];

const ALIASED_BYTES_MESSAGE = `aliases expand to more than ${describeBytes(MAX_ALIASED_BYTES)} of text`;

function leaf(value: Plain, offset: number, text: string | null = null): Converted {
  return [value, { offset, keyOffset: offset, text, entries: null, items: null }];
}

// `base` places the node's file in the compile's offset space (IssueList.addFile).
function startOf(node: unknown, fallback: number, base: number): number {
  if (isScalar(node) && node.value === null && !node.source) return fallback;
  if (isScalar(node) || isMap(node) || isSeq(node) || isAlias(node)) {
    const start = node.range?.[0];
    return start === undefined ? fallback : base + start;
  }
  return fallback;
}

function isMergeKey(key: unknown): boolean {
  return isScalar(key) && typeof key.value === 'symbol' && key.value.description === '<<';
}

class Converter {
  readonly #targets: Map<Alias, unknown>;
  readonly #issues: IssueList;
  readonly #base: number;
  readonly #budget: AliasBudget;
  // Collections being converted right now: an alias to one of them would recurse forever.
  readonly #active = new Set<unknown>();
  // The outermost alias being expanded right now: where a limit it crosses is reported.
  #expanding: { offset: number; path: PathSegment[] } | null = null;
  #exhausted = false;
  /** Set by problems that leave holes in the data (bad aliases, excess nesting): checking the
   * schema on what remains would only add confusing follow-up errors. */
  broken = false;

  constructor(targets: Map<Alias, unknown>, issues: IssueList, base: number, budget: AliasBudget) {
    this.#targets = targets;
    this.#issues = issues;
    this.#base = base;
    // Values copied through aliases, and their text in UTF-8 bytes (scalars and keys, however
    // deep inside the alias).
    this.#budget = budget;
  }

  convert(
    node: unknown,
    fallback: number,
    path: PathSegment[],
    depth: number,
    viaAlias: boolean,
  ): Converted {
    const offset = startOf(node, fallback, this.#base);
    if (this.#exhausted) return leaf(null, offset);
    if (viaAlias && ++this.#budget.values > MAX_ALIASED_VALUES) {
      return this.#exhaust(
        offset,
        path,
        `aliases expand to more than ${MAX_ALIASED_VALUES} values`,
      );
    }
    if (isAlias(node)) return this.#alias(node, offset, path, depth, viaAlias);
    if (isScalar(node)) {
      if (this.#expanding && !this.#copy(node.value, node.source)) {
        return this.#exhaust(offset, path, ALIASED_BYTES_MESSAGE);
      }
      return this.#scalar(node.value, node.source, offset);
    }
    if (!isMap(node) && !isSeq(node)) return leaf(null, offset);
    if (depth >= MAX_DEPTH) {
      this.#issues.add(offset, path, `nested more than ${MAX_DEPTH} levels deep`);
      this.broken = true;
      return leaf(null, offset);
    }
    this.#active.add(node);
    try {
      if (isMap(node)) return this.#map(node.items, offset, path, depth, viaAlias);
      const values: Plain[] = [];
      const items: Loc[] = [];
      node.items.forEach((item, index) => {
        const itemPath = [...path, index];
        // An !!omap or a flow `[a: 1]` may leave bare pairs in a list: read each as a one-key map.
        const [value, loc] = isPair(item)
          ? this.#map([item], startOf(item.key, offset, this.#base), itemPath, depth + 1, viaAlias)
          : this.convert(item, offset, itemPath, depth + 1, viaAlias);
        values.push(value);
        items.push(loc);
      });
      return [values, { offset, keyOffset: offset, text: null, entries: null, items }];
    } finally {
      this.#active.delete(node);
    }
  }

  // Reports a spent alias budget once, where the outermost alias that spent it is.
  #exhaust(offset: number, path: PathSegment[], message: string): Converted {
    const at = this.#expanding ?? { offset, path };
    this.#issues.add(at.offset, at.path, message);
    this.#exhausted = true;
    this.broken = true;
    return leaf(null, offset);
  }

  // Counts a scalar copied through an alias; false once the copies pass MAX_ALIASED_BYTES.
  #copy(value: unknown, source: string | undefined): boolean {
    const text = typeof value === 'string' ? value : (source ?? String(value));
    this.#budget.bytes += Buffer.byteLength(text, 'utf8');
    return this.#budget.bytes <= MAX_ALIASED_BYTES;
  }

  #alias(
    node: Alias,
    offset: number,
    path: PathSegment[],
    depth: number,
    viaAlias: boolean,
  ): Converted {
    const target = this.#targets.get(node);
    if (target === undefined) {
      this.#issues.add(
        offset,
        path,
        `alias *${node.source} has no anchor &${node.source} before it`,
      );
      this.broken = true;
      return leaf(null, offset);
    }
    if (this.#active.has(target)) {
      this.#issues.add(offset, path, `alias *${node.source} refers to a value that contains it`);
      this.broken = true;
      return leaf(null, offset);
    }
    // A scalar alias is one value, however long: its text is counted by length instead.
    const counted = viaAlias || !isScalar(target);
    const outermost = this.#expanding === null;
    if (outermost) this.#expanding = { offset, path };
    try {
      const [value, loc] = this.convert(target, offset, path, depth, counted);
      // Point at the alias for a value of the wrong kind; what is inside it stays at the anchor.
      return [value, { ...loc, offset, keyOffset: offset }];
    } finally {
      if (outermost) this.#expanding = null;
    }
  }

  #scalar(value: unknown, source: string | undefined, offset: number): Converted {
    switch (typeof value) {
      case 'string':
        return leaf(value, offset);
      case 'number':
      case 'boolean':
        return leaf(value, offset, source ?? String(value));
      case 'bigint':
        return leaf(Number(value), offset, source ?? String(value));
      default:
        if (value === null || value === undefined) return leaf(null, offset);
        // Timestamps, binary and other YAML 1.1 types: keep the text the user wrote.
        return leaf(source ?? String(value), offset);
    }
  }

  #map(
    pairs: readonly unknown[],
    offset: number,
    path: PathSegment[],
    depth: number,
    viaAlias: boolean,
  ): Converted {
    const object: PlainMap = Object.create(null);
    const entries = new Map<string, Loc>();
    const explicit = new Set<string>();
    for (const pair of pairs) {
      if (!isPair(pair)) continue;
      const keyOffset = startOf(pair.key, startOf(pair.value, offset, this.#base), this.#base);
      if (isMergeKey(pair.key)) {
        this.#merge(pair.value, keyOffset, object, entries, path, depth, viaAlias);
        continue;
      }
      const key = this.#key(pair.key, keyOffset, path);
      if (key === null) continue;
      if (key === '__proto__') {
        this.#issues.add(keyOffset, path, 'key "__proto__" is not allowed');
        continue;
      }
      if (explicit.has(key)) {
        this.#issues.add(keyOffset, [...path, key], `duplicate key ${quote(key)}`);
        continue;
      }
      const [value, loc] = this.convert(pair.value, keyOffset, [...path, key], depth + 1, viaAlias);
      explicit.add(key);
      object[key] = value;
      entries.set(key, { ...loc, keyOffset });
    }
    return [object, { offset, keyOffset: offset, text: null, entries, items: null }];
  }

  // `<<: *base` or `<<: [*a, *b]`: copies keys the map does not define itself; among several
  // merged maps the earlier one wins, as YAML's merge key type specifies.
  #merge(
    node: unknown,
    keyOffset: number,
    object: PlainMap,
    entries: Map<string, Loc>,
    path: PathSegment[],
    depth: number,
    viaAlias: boolean,
  ): void {
    const [value, loc] = this.convert(node, keyOffset, path, depth + 1, viaAlias);
    const sources: Array<[Plain, Loc | undefined]> = Array.isArray(value)
      ? value.map((item, i) => [item, loc.items?.[i]])
      : [[value, loc]];
    for (const [source, sourceLoc] of sources) {
      if (!isPlainMap(source) || !sourceLoc?.entries) {
        this.#issues.add(
          sourceLoc?.offset ?? keyOffset,
          path,
          'a merge key (<<) takes a map or a list of maps',
        );
        continue;
      }
      for (const [key, entryLoc] of sourceLoc.entries) {
        const entry = source[key];
        if (entries.has(key) || entry === undefined) continue;
        object[key] = entry;
        entries.set(key, entryLoc);
      }
    }
  }

  #key(node: unknown, offset: number, path: PathSegment[]): string | null {
    if (this.#exhausted) return null;
    const key = this.#keyText(node, offset, path);
    // Keys count like values: copied inside an alias, or named by an alias themselves.
    const copied = this.#expanding !== null || isAlias(node);
    if (key !== null && copied && !this.#copy(key, undefined)) {
      this.#exhaust(offset, path, ALIASED_BYTES_MESSAGE);
      return null;
    }
    return key;
  }

  #keyText(node: unknown, offset: number, path: PathSegment[]): string | null {
    let key = node;
    if (isAlias(node)) {
      key = this.#targets.get(node);
      if (key === undefined) {
        this.#issues.add(
          offset,
          path,
          `alias *${node.source} has no anchor &${node.source} before it`,
        );
        this.broken = true;
        return null;
      }
    }
    if (key === null || key === undefined) return '';
    if (!isScalar(key)) {
      this.#issues.add(offset, path, 'a key must be a plain value, not a list or a map');
      return null;
    }
    if (typeof key.value === 'string') return key.value;
    // Keys are names: `1.10:` names the task "1.10", not "1.1".
    return key.source ?? (key.value === null ? '' : String(key.value));
  }
}
