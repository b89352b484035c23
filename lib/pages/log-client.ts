// The log's tools on the job page, as a second part of the page's script
// (lib/pages/client.ts appends it, so the page's CSP hash covers it): the
// Timestamps toggle, sections folded (collapsed once finished, with their
// durations), steps timed, and search with highlights and next/previous. The
// lines come marked by the server (lib/pages/log-marks.ts: data-sec,
// data-step; data-t, each line's time); the main script tells this one when
// lines were added (`log:lines`) and loads earlier pages for a search
// (`logEl.loadEarlier`), so a search covers the whole log, not the page shown.
import { type Html, html } from './html.ts';

/** The tools above a log: the Timestamps box and the search form. */
export function logTools(): Html {
  return html`<label class="log-tool"><input type="checkbox" data-ts-toggle> Timestamps</label>
<span class="log-tool" role="search"><input type="search" placeholder="Search this log" aria-label="search the log" data-search-input size="22"><button type="button" class="button" data-search-prev aria-label="previous match">\u2191</button><button type="button" class="button" data-search-next aria-label="next match">\u2193</button><span class="muted" data-search-count aria-live="polite"></span></span>`;
}

/** The script's source: no backquote and no dollar-brace, so it can sit in the main script's raw string. */
export const LOG_SCRIPT = String.raw`
(function () {
  'use strict';
  var logEl = document.querySelector('[data-log]');
  if (!logEl) return;
  var data = JSON.parse(document.getElementById('page-data').textContent);
  var final = !!data.taskFinal;
  var st;
  function reset() { st = { stack: [], step: null, last: null }; }
  reset();

  function fmt(ms) {
    var s = Math.max(0, Math.round(ms / 1000));
    if (s < 60) return s + 's';
    var m = Math.floor(s / 60);
    if (m < 60) return m + 'm ' + (s % 60) + 's';
    return Math.floor(m / 60) + 'h ' + (m % 60) + 'm';
  }
  function timeOf(el) { var t = Number(el && el.getAttribute('data-t')); return t > 0 ? t : null; }
  function afterNumber(el, node) {
    var n = el.querySelector('a.n');
    el.insertBefore(node, n ? n.nextSibling : el.firstChild);
  }
  function setDuration(el, ms) {
    var old = el.querySelector(':scope > .dur');
    if (old) old.remove();
    var d = document.createElement('span');
    d.className = 'deco dur';
    // Drawn by CSS, so the line's text stays the log's.
    d.setAttribute('data-dur', fmt(ms));
    d.title = 'duration';
    afterNumber(el, d);
  }
  function setCollapsed(s, collapsed) {
    s.collapsed = collapsed;
    s.button.setAttribute('aria-expanded', collapsed ? 'false' : 'true');
    s.lines.forEach(function (line) {
      line.hidden = line._secs.some(function (x) { return x.collapsed; });
    });
  }
  function endStep(t) {
    if (st.step && st.step.t0 !== null && t !== null) setDuration(st.step.el, t - st.step.t0);
    st.step = null;
  }
  function finishSection(s, t1) {
    s.done = true;
    if (s.t0 !== null && t1 !== null) setDuration(s.el, t1 - s.t0);
    if (!s.touched) setCollapsed(s, true);
  }
  function process(el) {
    if (el._done) return;
    el._done = true;
    var parents = st.stack.slice();
    el._secs = parents;
    parents.forEach(function (s) { s.lines.push(el); });
    el.hidden = parents.some(function (s) { return s.collapsed; });
    var sec = el.getAttribute('data-sec');
    if (sec === 'start') {
      var s = {
        el: el, lines: [], collapsed: false, touched: false, done: false,
        name: el.getAttribute('data-sec-name'),
        t0: Number(el.getAttribute('data-sec-t')) || timeOf(el),
      };
      var b = document.createElement('button');
      b.type = 'button';
      b.className = 'deco fold';
      b.setAttribute('aria-label', 'fold section');
      b.addEventListener('click', function () { s.touched = true; setCollapsed(s, !s.collapsed); });
      s.button = b;
      afterNumber(el, b);
      el.classList.add('sec-head');
      el._sec = s;
      setCollapsed(s, false);
      st.stack.push(s);
    } else if (sec === 'end') {
      var name = el.getAttribute('data-sec-name');
      var i = st.stack.length - 1;
      if (name) while (i >= 0 && st.stack[i].name !== name) i--;
      if (i >= 0) {
        var done = st.stack.splice(i);
        var t1 = Number(el.getAttribute('data-sec-t')) || timeOf(el);
        for (var k = done.length - 1; k >= 0; k--) finishSection(done[k], t1);
      }
    } else if (el.hasAttribute('data-step')) {
      // The lines of one script entry are echoed together: one step.
      if (!(st.last && st.last.hasAttribute('data-step'))) {
        endStep(timeOf(el));
        st.step = { el: el, t0: timeOf(el) };
      }
    }
    st.last = el;
  }
  function processAll(isFinal) {
    logEl.querySelectorAll('.l').forEach(process);
    // A finished log's last step ends with its last line.
    if (isFinal && st.step) endStep(timeOf(st.last));
  }
  function redo(isFinal) {
    logEl.querySelectorAll('.deco').forEach(function (d) { d.remove(); });
    logEl.querySelectorAll('.l').forEach(function (l) {
      l._done = false; l.hidden = false; l.classList.remove('sec-head');
    });
    reset();
    processAll(isFinal);
  }
  logEl.addEventListener('log:lines', function (ev) {
    var d = ev.detail || {};
    if (d.final !== undefined) final = !!d.final;
    if (d.reset || d.prepended) redo(final); else processAll(final);
  });
  processAll(final);

  var tsBox = document.querySelector('[data-ts-toggle]');
  if (tsBox) {
    var KEY = 'conductor.log.timestamps';
    try { tsBox.checked = localStorage.getItem(KEY) === '1'; } catch (e) {}
    logEl.classList.toggle('show-ts', tsBox.checked);
    tsBox.addEventListener('change', function () {
      logEl.classList.toggle('show-ts', tsBox.checked);
      try { localStorage.setItem(KEY, tsBox.checked ? '1' : '0'); } catch (e) {}
    });
  }

  var input = document.querySelector('[data-search-input]');
  var count = document.querySelector('[data-search-count]');
  var hits = [], cur = -1, query = '', searching = false;
  function clearHits() {
    logEl.querySelectorAll('mark.hit').forEach(function (m) {
      var p = m.parentNode;
      p.replaceChild(document.createTextNode(m.textContent), m);
      p.normalize();
    });
    hits = []; cur = -1;
  }
  function markAll(q) {
    var lower = q.toLowerCase();
    logEl.querySelectorAll('.l').forEach(function (line) {
      var walker = document.createTreeWalker(line, NodeFilter.SHOW_TEXT, {
        acceptNode: function (n) {
          return n.parentNode.closest('.ts, .deco, a.n') ? NodeFilter.FILTER_REJECT : NodeFilter.FILTER_ACCEPT;
        },
      });
      var nodes = [];
      while (walker.nextNode()) nodes.push(walker.currentNode);
      nodes.forEach(function (node) {
        var text = node.nodeValue, low = text.toLowerCase(), at = low.indexOf(lower);
        if (at < 0) return;
        var frag = document.createDocumentFragment(), pos = 0;
        while (at >= 0) {
          frag.appendChild(document.createTextNode(text.slice(pos, at)));
          var m = document.createElement('mark');
          m.className = 'hit';
          m.textContent = text.slice(at, at + q.length);
          frag.appendChild(m);
          hits.push(m);
          pos = at + q.length;
          at = low.indexOf(lower, pos);
        }
        frag.appendChild(document.createTextNode(text.slice(pos)));
        node.parentNode.replaceChild(frag, node);
      });
    });
  }
  function go(step) {
    if (hits.length === 0) return;
    if (cur >= 0) hits[cur].classList.remove('cur');
    cur = (cur + step + hits.length) % hits.length;
    var hit = hits[cur];
    hit.classList.add('cur');
    var line = hit.closest('.l');
    (line && line._secs || []).forEach(function (s) { if (s.collapsed) { s.touched = true; setCollapsed(s, false); } });
    hit.scrollIntoView({ block: 'center' });
    count.textContent = (cur + 1) + ' of ' + hits.length;
  }
  async function search(q) {
    if (searching) return;
    searching = true;
    try {
      clearHits();
      query = q;
      if (!q) { count.textContent = ''; return; }
      count.textContent = 'searching\u2026';
      // The whole log: the pages before the one shown first (at most 256 MiB).
      for (var n = 0; n < 256 && logEl.loadEarlier && (await logEl.loadEarlier()); n++) {}
      markAll(q);
      if (hits.length === 0) count.textContent = 'no matches';
      else go(1);
    } finally {
      searching = false;
    }
  }
  if (input) {
    input.addEventListener('keydown', function (ev) {
      if (ev.key !== 'Enter') return;
      ev.preventDefault();
      if (input.value === query && hits.length) go(ev.shiftKey ? -1 : 1);
      else search(input.value);
    });
    input.addEventListener('search', function () { if (input.value === '') search(''); });
    var next = document.querySelector('[data-search-next]');
    var prev = document.querySelector('[data-search-prev]');
    next.addEventListener('click', function () { if (input.value !== query) search(input.value); else go(1); });
    prev.addEventListener('click', function () { if (input.value !== query) search(input.value); else go(-1); });
  }
})();`;
