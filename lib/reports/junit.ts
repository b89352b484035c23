// Reading a JUnit XML report (docs/pipeline.md#reports-test-results): the
// shapes Surefire, pytest, jest-junit, `node --test --test-reporter=junit`
// and go-junit-report write, which share <testsuites>/<testsuite>/<testcase>
// with <failure>, <error> and <skipped> inside a case. Pure: bytes in, a
// summary out, or a ReportError saying why the file cannot be read. Every
// bound is in limits.ts; the XML is parsed by fast-xml-parser with an entity
// decoder of our own that knows the five XML entities and character
// references only, and refuses a document that declares entities: nothing a
// report says is ever expanded (billion laughs, test/reports/junit.test.ts).
import { XMLParser } from 'fast-xml-parser';
import {
  MAX_DEPTH,
  MESSAGE_MAX_CHARS,
  MESSAGE_MAX_LINES,
  NAME_MAX_CHARS,
  REPORT_MAX_BYTES,
  REPORT_MAX_CASES,
  REPORT_MAX_FAILURES,
} from './limits.ts';
import {
  type ParsedReport,
  ReportError,
  type TestFailure,
  type TestTotals,
  testKey,
} from './report.ts';

export * from './report.ts';

const XML_ENTITIES: Record<string, string> = {
  amp: '&',
  lt: '<',
  gt: '>',
  quot: '"',
  apos: "'",
};

/**
 * The parser's entity decoder: the five XML entities and numeric character
 * references, nothing else. A DOCTYPE that declares entities (the billion
 * laughs, an external entity) stops the parse; an undeclared `&name;` stays
 * as written.
 */
const entityDecoder = {
  setExternalEntities() {},
  addInputEntities(entities: Record<string, unknown>) {
    if (Object.keys(entities).length > 0) {
      throw new ReportError('the report declares XML entities (a DOCTYPE); reports need none');
    }
  },
  reset() {},
  setXmlVersion() {},
  decode(text: string): string {
    if (!text.includes('&')) return text;
    return text.replace(/&(#x[0-9a-fA-F]{1,6}|#[0-9]{1,7}|[a-z]{2,4});/g, (whole, ref: string) => {
      if (ref.startsWith('#')) {
        const code = ref[1] === 'x' ? Number.parseInt(ref.slice(2), 16) : Number(ref.slice(1));
        // NUL and what is not a code point stay as written.
        return code > 0 && code <= 0x10ffff ? String.fromCodePoint(code) : whole;
      }
      return XML_ENTITIES[ref] ?? whole;
    });
  },
};

// Elements that may repeat are always arrays; attributes come without a prefix.
const REPEATED = new Set([
  'testsuite',
  'testcase',
  'failure',
  'error',
  'skipped',
  'flakyFailure',
  'flakyError',
  'rerunFailure',
  'rerunError',
]);

// What a case's outcome and the suite's output hold is taken as raw text
// (stop nodes): never parsed as elements, read only as far as a message
// needs (innerText), so a report's size costs a scan, not a parse.
const RAW = [
  'failure',
  'error',
  'skipped',
  'flakyFailure',
  'flakyError',
  'rerunFailure',
  'rerunError',
];

function parser(): XMLParser {
  return new XMLParser({
    ignoreAttributes: false,
    attributeNamePrefix: '',
    attributesGroupName: '@',
    textNodeName: '#text',
    alwaysCreateTextNode: true,
    parseTagValue: false,
    parseAttributeValue: false,
    trimValues: true,
    ignoreDeclaration: true,
    ignorePiTags: true,
    processEntities: true,
    entityDecoder,
    maxNestedTags: MAX_DEPTH,
    // Output written by the tests is never read: not parsed, not kept.
    stopNodes: [...RAW, 'system-out', 'system-err', 'properties'].map((name) => `..${name}`),
    isArray: (name) => REPEATED.has(name),
  });
}

type Node = Record<string, unknown> & { '@'?: Record<string, string>; '#text'?: string };

/** Counts `<testcase` in the text without parsing it: a file with too many is refused first. */
function countCases(xml: string): number {
  let count = 0;
  for (let at = xml.indexOf('<testcase'); at !== -1; at = xml.indexOf('<testcase', at + 9)) {
    count++;
    if (count > REPORT_MAX_CASES) break;
  }
  return count;
}

/** Reads one JUnit XML report. Throws a ReportError naming what is wrong with the file. */
export function parseJUnit(bytes: Uint8Array): ParsedReport {
  if (bytes.byteLength > REPORT_MAX_BYTES) {
    throw new ReportError(
      `the report is ${bytes.byteLength} bytes; at most ${REPORT_MAX_BYTES} bytes are read`,
    );
  }
  const xml = new TextDecoder('utf-8').decode(bytes);
  if (countCases(xml) > REPORT_MAX_CASES) {
    throw new ReportError(
      `the report holds more than ${REPORT_MAX_CASES} test cases; at most ${REPORT_MAX_CASES} are read per file (split it)`,
    );
  }
  let doc: Node;
  try {
    doc = parser().parse(xml) as Node;
  } catch (err) {
    if (err instanceof ReportError) throw err;
    const message = (err as Error).message.split('\n')[0]!.slice(0, 200);
    const at = /position (\d+)/.exec(message);
    const line = at ? ` at line ${lineAt(xml, Number(at[1]))}` : '';
    throw new ReportError(`not well-formed XML${line}: ${message}`);
  }
  checkComplete(xml, doc);
  const read = new Reader();
  if (Array.isArray(doc.testsuites) || isNode(doc.testsuites)) {
    const roots = Array.isArray(doc.testsuites) ? doc.testsuites : [doc.testsuites];
    for (const root of roots) if (isNode(root)) read.container(root, attr(root, 'name'), 0);
  } else if (Array.isArray(doc.testsuite)) {
    for (const suite of doc.testsuite) if (isNode(suite)) read.suite(suite, null, 0);
  } else {
    const root = Object.keys(doc).find((k) => k !== '#text');
    throw new ReportError(
      root
        ? `not a JUnit report: the root element is <${cut(root, 50)}>, not <testsuites> or <testsuite>`
        : 'not a JUnit report: the file has no elements',
    );
  }
  const left = read.failureCount - read.failures.length;
  return {
    totals: read.totals,
    failures: read.failures,
    passed: read.passed,
    note:
      left > 0
        ? `${read.failureCount} failures; the first ${REPORT_MAX_FAILURES} are kept, the rest counted`
        : null,
  };
}

/** The 1-based line of a character offset. */
function lineAt(text: string, offset: number): number {
  let line = 1;
  for (let at = text.indexOf('\n'); at !== -1 && at < offset; at = text.indexOf('\n', at + 1))
    line++;
  return line;
}

/**
 * A file cut short (a test run killed while writing it) still parses, the
 * parser being lenient about unclosed elements: it must end with its root's
 * end tag (or be one empty root element), comments and space aside.
 */
function checkComplete(xml: string, doc: Node): void {
  const root = Object.keys(doc).find((k) => k === 'testsuites' || k === 'testsuite');
  if (!root) return;
  let tail = xml.trimEnd();
  for (let n = 0; n < 100 && tail.endsWith('-->'); n++) {
    const open = tail.lastIndexOf('<!--');
    if (open === -1) break;
    tail = tail.slice(0, open).trimEnd();
  }
  const closed = tail.endsWith(`</${root}>`);
  // An empty root, <testsuite name="x"/>: its own tag is the whole document's last.
  const start = xml.indexOf(`<${root}`);
  const end = xml.indexOf('>', start);
  const empty = end === tail.length - 1 && xml[end - 1] === '/';
  if (!closed && !empty) {
    throw new ReportError(
      `not well-formed XML at line ${lineAt(xml, xml.length)}: the file ends before </${root}> (cut short?)`,
    );
  }
}

/** A raw element's text as a message needs it: CDATA unwrapped, entities decoded, the head only. */
function innerText(raw: string): string {
  const head = raw.slice(0, MESSAGE_MAX_CHARS * 4);
  let out = '';
  let last = 0;
  for (const m of head.matchAll(/<!\[CDATA\[([\s\S]*?)(?:\]\]>|$)/g)) {
    out += entityDecoder.decode(head.slice(last, m.index));
    out += m[1];
    last = m.index + m[0].length;
  }
  return out + entityDecoder.decode(head.slice(last));
}

function isNode(value: unknown): value is Node {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}

function attr(node: Node, name: string): string | null {
  const value = node['@']?.[name];
  return typeof value === 'string' && value !== '' ? value : null;
}

function cut(text: string, max = NAME_MAX_CHARS): string {
  return text.length > max ? `${text.slice(0, max - 1)}…` : text;
}

function children(node: Node, name: string): Node[] {
  const value = node[name];
  return Array.isArray(value) ? value.filter(isNode) : [];
}

/** The first lines of what a failure says: its message, then its text where that adds to it. */
function messageOf(node: Node): string {
  const message = (attr(node, 'message') ?? '').trim();
  const text = innerText(typeof node['#text'] === 'string' ? node['#text'] : '').trim();
  const whole =
    text === '' ? message : message === '' || text.includes(message) ? text : `${message}\n${text}`;
  const lines = whole.split(/\r?\n/);
  let kept = lines.slice(0, MESSAGE_MAX_LINES).join('\n');
  if (lines.length > MESSAGE_MAX_LINES) kept += '\n…';
  return kept.length > MESSAGE_MAX_CHARS ? `${kept.slice(0, MESSAGE_MAX_CHARS - 1)}…` : kept;
}

function seconds(value: string | null): number {
  const n = value === null ? Number.NaN : Number(value.replace(/,/g, ''));
  return Number.isFinite(n) && n >= 0 && n < 1e9 ? n : 0;
}

function lineOf(value: string | null): number | null {
  if (value === null || !/^[0-9]{1,9}$/.test(value)) return null;
  return Number(value);
}

class Reader {
  totals: TestTotals = { passed: 0, failed: 0, errored: 0, skipped: 0, time_s: 0 };
  failures: TestFailure[] = [];
  failureCount = 0;
  passed = new Set<string>();

  /** <testsuites>, or a suite's nested suites: cases directly inside belong to `name`. */
  container(node: Node, name: string | null, depth: number): void {
    for (const suite of children(node, 'testsuite')) this.suite(suite, name, depth + 1);
    for (const c of children(node, 'testcase')) this.testcase(c, name);
  }

  suite(node: Node, outer: string | null, depth: number): void {
    if (depth > MAX_DEPTH) throw new ReportError(`test suites nest deeper than ${MAX_DEPTH}`);
    this.container(node, attr(node, 'name') ?? outer, depth);
  }

  testcase(node: Node, suiteName: string | null): void {
    const classname = attr(node, 'classname');
    const test = {
      suite: cut(suiteName ?? classname ?? ''),
      name: cut(attr(node, 'name') ?? '(unnamed)'),
      classname: classname === null ? null : cut(classname),
      file: attr(node, 'file') === null ? null : cut(attr(node, 'file')!),
      line: lineOf(attr(node, 'line')),
    };
    this.totals.time_s += seconds(attr(node, 'time'));
    const failure = children(node, 'failure')[0];
    const error = children(node, 'error')[0];
    if (failure || error) {
      const kind = failure ? 'failed' : 'errored';
      this.totals[kind]++;
      this.keep({ ...test, kind, flaky: false, message: messageOf((failure ?? error)!) });
      return;
    }
    if (children(node, 'skipped').length > 0) {
      this.totals.skipped++;
      return;
    }
    this.totals.passed++;
    this.passed.add(testKey(test));
    // Surefire's rerunFailingTestsCount: failed, then passed on a rerun.
    const flaky = children(node, 'flakyFailure')[0] ?? children(node, 'flakyError')[0];
    if (flaky) this.keep({ ...test, kind: 'passed', flaky: true, message: messageOf(flaky) });
  }

  private keep(failure: TestFailure): void {
    this.failureCount++;
    if (this.failures.length < REPORT_MAX_FAILURES) this.failures.push(failure);
  }
}
