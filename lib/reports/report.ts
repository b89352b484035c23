// What a test report says and the key a test is known by: apart from
// junit.ts so that what stores and shows reports does not load the XML parser
// (fast-xml-parser), which only reading a report needs (docs/architecture.md,
// "Bundles").

/** A report's or a task's counts. */
export interface TestTotals {
  passed: number;
  failed: number;
  errored: number;
  skipped: number;
  time_s: number;
}

/** A test that did not pass, or passed only after failing (flaky). */
export interface TestFailure {
  kind: 'failed' | 'errored' | 'passed';
  flaky: boolean;
  suite: string;
  name: string;
  classname: string | null;
  file: string | null;
  line: number | null;
  message: string;
}

export interface ParsedReport {
  totals: TestTotals;
  /** At most REPORT_MAX_FAILURES, in file order. */
  failures: TestFailure[];
  /** The tests that passed, by testKey: an earlier attempt's failure among them was flaky. */
  passed: Set<string>;
  /** What was left out (failures past the limit), for the task's note; null when nothing. */
  note: string | null;
}

/** Why a report could not be read: the task's note, naming the file's line where there is one. */
export class ReportError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'ReportError';
  }
}

/** The key a test is known by across attempts: its suite, class and name. */
export function testKey(t: { suite: string; classname: string | null; name: string }): string {
  return `${t.suite}\0${t.classname ?? ''}\0${t.name}`;
}
