// HTML text for the pages: one escaping function every value goes through,
// the page shell (styles, header, script), and how times and durations read.
import { formatDuration } from '../duration.ts';

const ESCAPES: Record<string, string> = {
  '&': '&amp;',
  '<': '&lt;',
  '>': '&gt;',
  '"': '&quot;',
  "'": '&#39;',
};

/** Text made safe inside an element or a quoted attribute. */
export function esc(value: unknown): string {
  const text = String(value ?? '');
  // Most values have nothing to escape: a test is cheaper than a replace.
  return NEEDS_ESCAPE.test(text) ? text.replace(/[&<>"']/g, (c) => ESCAPES[c]!) : text;
}
const NEEDS_ESCAPE = /[&<>"']/;

/** HTML already escaped (built by `html` or `esc`), passed through `html` as is. */
export class Html {
  constructor(readonly text: string) {}
  toString(): string {
    return this.text;
  }
}

/**
 * A template whose every interpolated value is escaped, unless it is Html
 * (or an array of Html, joined): the only way pages put values into markup.
 */
export function html(strings: TemplateStringsArray, ...values: unknown[]): Html {
  let out = strings[0]!;
  for (let i = 0; i < values.length; i++) {
    out += piece(values[i]) + strings[i + 1]!;
  }
  return new Html(out);
}

function piece(value: unknown): string {
  if (value instanceof Html) return value.text;
  if (Array.isArray(value)) return value.map(piece).join('');
  if (value === null || value === undefined || value === false) return '';
  return esc(value);
}

/** JSON inside a <script> element: no `</script>` or `<!--` can close it early. */
export function scriptJson(value: unknown): Html {
  return new Html(
    JSON.stringify(value)
      .replace(/</g, '\\u003c')
      .replace(/>/g, '\\u003e')
      .replace(/\u2028/g, '\\u2028')
      .replace(/\u2029/g, '\\u2029'),
  );
}

/** "3 min ago", "in 2 h": how long ago (or until) a time is, from `now`. */
export function relativeTime(at: Date, now = Date.now()): string {
  const s = Math.round((now - at.getTime()) / 1000);
  const abs = Math.abs(s);
  const [n, unit] =
    abs < 45
      ? [0, 'now']
      : abs < 3600
        ? [Math.round(abs / 60), 'min']
        : abs < 86_400
          ? [Math.round(abs / 3600), 'h']
          : [Math.round(abs / 86_400), abs < 2 * 86_400 ? 'day' : 'days'];
  if (unit === 'now') return 'just now';
  return s >= 0 ? `${n} ${unit} ago` : `in ${n} ${unit}`;
}

/** A time shown relative, exact in its tooltip; the page's script keeps the text current. */
export function timeEl(at: Date | string | null | undefined, now = Date.now()): Html {
  if (!at) return html`<span class="muted">–</span>`;
  const d = at instanceof Date ? at : new Date(at);
  const iso = d.toISOString();
  const exact = `${iso.slice(0, 10)} ${iso.slice(11, 19)} UTC`;
  return html`<time datetime="${iso}" title="${exact}">${relativeTime(d, now)}</time>`;
}

/** A duration as people read it: tenths of a second under 10 s, then 1m30s. */
export function formatMs(ms: number): string {
  return ms < 10_000 ? `${(ms / 1000).toFixed(1)}s` : formatDuration(Math.round(ms / 1000));
}

/** How long something ran: from start to finish, or to now while it runs; '' before it starts. */
export function durationText(
  start: Date | string | null | undefined,
  finish: Date | string | null | undefined,
  now = Date.now(),
): string {
  if (!start) return '';
  const from = new Date(start).getTime();
  const to = finish ? new Date(finish).getTime() : now;
  return formatMs(Math.max(0, to - from));
}

const STYLE = `
:root{color-scheme:light dark;--bg:#fff;--fg:#1b1f24;--muted:#59636e;--line:#d1d9e0;--panel:#f6f8fa;
--ok:#1a7f37;--bad:#cf222e;--run:#9a6700;--wait:#59636e;--off:#8c959f;--link:#0969da;--focus:#0969da}
@media (prefers-color-scheme:dark){:root{--bg:#0d1117;--fg:#e6edf3;--muted:#9198a1;--line:#3d444d;
--panel:#151b23;--ok:#3fb950;--bad:#f85149;--run:#d29922;--wait:#9198a1;--off:#656c76;--link:#4493f8;--focus:#4493f8}}
*{box-sizing:border-box}[hidden]{display:none!important}body{margin:0;font:15px/1.45 system-ui,-apple-system,"Segoe UI",sans-serif;background:var(--bg);color:var(--fg)}
a{color:var(--link)}:focus-visible{outline:3px solid var(--focus);outline-offset:2px}
header.top{display:flex;gap:1rem;align-items:center;flex-wrap:wrap;padding:.6rem 1rem;border-bottom:1px solid var(--line);background:var(--panel)}
header.top .brand{font-weight:700;text-decoration:none;color:var(--fg)}header.top form{margin-left:auto}
main{padding:1rem;max-width:1400px;margin:0 auto}h1{font-size:1.35rem;margin:.2rem 0 .6rem;overflow-wrap:anywhere}
h2{font-size:1.1rem;margin:1.2rem 0 .5rem}.muted{color:var(--muted)}code,.mono{font-family:ui-monospace,SFMono-Regular,Menlo,Consolas,monospace;font-size:.9em}
button,.button{font:inherit;padding:.35rem .8rem;border:1px solid var(--line);border-radius:6px;background:var(--panel);color:var(--fg);cursor:pointer;text-decoration:none;display:inline-block}
button.danger{color:var(--bad)}input{font:inherit;padding:.4rem;border:1px solid var(--line);border-radius:6px;background:var(--bg);color:var(--fg);width:100%;max-width:28rem}
table{border-collapse:collapse;width:100%}th,td{text-align:left;padding:.35rem .5rem;border-bottom:1px solid var(--line);vertical-align:top}
th{font-weight:600;color:var(--muted);font-size:.85rem}.scroll{overflow-x:auto;-webkit-overflow-scrolling:touch}
.state{font-weight:600;white-space:nowrap}.state::before{content:"";display:inline-block;width:.65em;height:.65em;border-radius:50%;margin-right:.35em;background:currentColor;vertical-align:.05em}
[data-state=success],[data-job-state=success],.st-success{color:var(--ok)}[data-state=failed],[data-job-state=failed],.st-failed{color:var(--bad)}
[data-state=running],[data-job-state=running],.st-running{color:var(--run)}[data-state=queued],[data-state=waiting],[data-job-state=pending],[data-job-state=blocked],.st-queued,.st-waiting,.st-pending,.st-blocked{color:var(--wait)}
[data-state=skipped],[data-state=cancelled],[data-job-state=cancelled],.st-skipped,.st-cancelled{color:var(--off)}
dl.facts{display:grid;grid-template-columns:max-content 1fr;gap:.2rem 1rem;margin:.5rem 0}dl.facts dt{color:var(--muted)}dl.facts dd{margin:0;overflow-wrap:anywhere}
.actions{display:flex;gap:.5rem;flex-wrap:wrap;margin:.6rem 0}.actions form{margin:0}
.errors{background:var(--panel);border-left:4px solid var(--bad);padding:.5rem .8rem;white-space:pre-wrap;overflow-wrap:anywhere}
.graph{border:1px solid var(--line);border-radius:8px;background:var(--panel);max-height:75vh;overflow:auto}
.graph svg{display:block}.graph text{font:13px system-ui,sans-serif;fill:var(--fg)}.graph .sub{fill:var(--muted);font-size:11.5px}
.graph .node rect{fill:var(--bg);stroke:currentColor;stroke-width:1.5}.graph .node .bar{fill:currentColor;stroke:none}
.graph .node[data-state=skipped] rect,.graph .node[data-state=cancelled] rect{stroke-dasharray:4 3}.graph .node[data-state=skipped] text,.graph .node[data-state=cancelled] text{fill:var(--off)}
.graph .node.open rect{stroke-width:3}.graph a.node:focus-visible{outline:none}.graph a.node:focus-visible rect{stroke:var(--focus);stroke-width:3.5}
.graph .group>rect{fill:none;stroke:var(--line);stroke-dasharray:2 2}.graph .group>text{fill:var(--muted);font-weight:600}.graph .edge{fill:none;stroke:var(--off);stroke-width:1.3}
.log-head{display:flex;gap:.6rem;align-items:center;flex-wrap:wrap;margin:.4rem 0}
pre.log{margin:0;padding:.5rem 0;background:#0d1117;color:#e6edf3;border-radius:8px;overflow:auto;max-height:80vh;font:12.5px/1.5 ui-monospace,SFMono-Regular,Menlo,Consolas,monospace;counter-reset:none}
pre.log .l{display:block;padding:0 .8rem 0 0;white-space:pre-wrap;overflow-wrap:anywhere}pre.log .l:target{background:#3b2e00}
pre.log a.n{display:inline-block;min-width:4.5em;padding-right:1em;text-align:right;color:#6e7681;text-decoration:none;user-select:none}
pre.log a.n::before{content:attr(data-n)}pre.log a.n:hover{color:#e6edf3}
pre.log .ts{display:none;color:#6e7681;padding-right:1ch;user-select:none}pre.log.show-ts .ts{display:inline}pre.log .ts::before{content:attr(data-ts)}
pre.log .l[hidden],pre.log .l[data-sec="end"]{display:none}
pre.log .fold{background:none;border:0;color:#8b949e;cursor:pointer;padding:0 .4em 0 0;font:inherit}pre.log .fold::before{content:"\\25be"}pre.log .fold[aria-expanded=false]::before{content:"\\25b8"}
pre.log .sec-head{font-weight:600}pre.log .dur{float:right;color:#8b949e;padding-left:1em;user-select:none}pre.log .dur::before{content:attr(data-dur)}
pre.log mark.hit{background:#9e6a03;color:#fff}pre.log mark.hit.cur{background:#f2cc60;color:#000}
.log-tool{display:inline-flex;gap:.3rem;align-items:center}.log-tool [data-search-count]{white-space:nowrap}
.tabs{display:flex;gap:.3rem;flex-wrap:wrap}.tabs a[aria-current=true]{font-weight:700;text-decoration:none;color:var(--fg)}
.pager{display:flex;gap:1rem;margin:.8rem 0}.card{border:1px solid var(--line);border-radius:8px;padding:.6rem .9rem;margin:.6rem 0}
@media (max-width:640px){main{padding:.6rem}th.wide,td.wide{display:none}dl.facts{gap:.15rem .7rem}}
`;

/** A whole page: the shell around `body`, with `script` (already safe) at the end. */
export function page(opts: {
  title: string;
  body: Html;
  signedIn: boolean;
  csrf?: string;
  script?: Html;
}): string {
  const account = opts.signedIn
    ? html`<form method="post" action="/logout"><input type="hidden" name="csrf" value="${opts.csrf}"><button type="submit">Sign out</button></form>`
    : html`<a href="/login" class="button" style="margin-left:auto">Sign in</a>`;
  return html`<!doctype html>
<html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width,initial-scale=1">
<meta name="referrer" content="same-origin">
<title>${opts.title} · Conductor</title>
<style>${new Html(STYLE)}</style></head>
<body><header class="top"><a class="brand" href="/">Conductor</a>${account}</header>
<main>${opts.body}</main>${opts.script ?? ''}</body></html>`.text;
}

/** A job or task state as a word beside its colour. */
export function stateEl(state: string, attr: 'data-state' | 'data-job-state' | null = null): Html {
  if (attr === 'data-job-state') {
    return html`<span class="state" data-job-state="${state}">${state}</span>`;
  }
  return html`<span class="state st-${state}">${state}</span>`;
}

/** A ref as people say it: `main` for refs/heads/main, `v1.2` for a tag. */
export function shortRef(ref: string): string {
  return ref.replace(/^refs\/(heads|tags)\//, '');
}
