// The job page's script, inline (no framework, no second request): while the
// job runs it polls the page's JSON every 1.5 s and puts what changed in
// place (task states, the header, the actions, the open log's new lines), and
// stops once the job and the open log are final. It also keeps relative times
// current, loads earlier log lines, and downloads a whole log page by page.
// Everything it inserts was rendered and escaped by the server.

import { LOG_SCRIPT } from './log-client.ts';

/** The script's source; kept free of `${` (but for the log tools') so it can be a raw string. */
export const CLIENT_SCRIPT = String.raw`(function () {
  'use strict';
  var cfg = JSON.parse(document.getElementById('page-data').textContent);
  var POLL_MS = 1500;
  var logEl = document.querySelector('[data-log]');
  var nodes = {};
  document.querySelectorAll('[data-task-id]').forEach(function (el) { nodes[el.getAttribute('data-task-id')] = el; });
  var rows = {};
  document.querySelectorAll('tr[data-row]').forEach(function (el) { rows[el.getAttribute('data-row')] = el; });

  function url(base, params) {
    var q = new URLSearchParams();
    Object.keys(params).forEach(function (k) { if (params[k] !== null && params[k] !== undefined) q.set(k, String(params[k])); });
    if (cfg.sig) q.set('sig', cfg.sig);
    return base + '?' + q.toString();
  }
  function fragment(htmlText) {
    var t = document.createElement('template');
    t.innerHTML = htmlText;
    return t.content;
  }
  function relative(at) {
    var s = Math.round((Date.now() - at) / 1000), a = Math.abs(s), n, u;
    if (a < 45) return 'just now';
    if (a < 3600) { n = Math.round(a / 60); u = 'min'; }
    else if (a < 86400) { n = Math.round(a / 3600); u = 'h'; }
    else { n = Math.round(a / 86400); u = a < 172800 ? 'day' : 'days'; }
    return s >= 0 ? n + ' ' + u + ' ago' : 'in ' + n + ' ' + u;
  }
  function times() {
    document.querySelectorAll('time[datetime]').forEach(function (el) {
      el.textContent = relative(Date.parse(el.getAttribute('datetime')));
    });
  }
  function setText(el, sel, text) {
    var t = el && el.querySelector(sel);
    if (t && t.textContent !== text) t.textContent = text;
  }
  function clip(text, n) { return text.length > n ? text.slice(0, n - 1) + '\u2026' : text; }

  function updateTask(t) {
    var node = nodes[t.id];
    if (node) {
      if (node.getAttribute('data-state') !== t.state) node.setAttribute('data-state', t.state);
      setText(node, '.st', clip(t.status, 35));
      setText(node, '.note', clip(t.note, 35));
      var title = node.querySelector('title');
      if (title) title.textContent = [node.getAttribute('data-task-name'), t.status, t.note].filter(Boolean).join('\n');
    }
    var row = rows[t.id];
    if (row) {
      var st = row.querySelector('.state');
      if (st && st.textContent !== t.state) { st.textContent = t.state; st.className = 'state st-' + t.state; }
      setText(row, '.dur', t.duration);
      setText(row, '.note', t.note);
    }
  }

  function appendLog(piece) {
    if (!logEl) return;
    if (cfg.partial && logEl.lastElementChild) logEl.removeChild(logEl.lastElementChild);
    if (piece.html) {
      logEl.appendChild(fragment(piece.html));
      var empty = document.querySelector('[data-log-empty]');
      if (empty) empty.remove();
    }
    cfg.end = piece.end;
    cfg.size = piece.size;
    cfg.partial = piece.partial;
    cfg.nextLine = piece.line + piece.lines - (piece.partial ? 1 : 0);
    var size = document.querySelector('[data-log-size]');
    if (size) size.textContent = piece.size ? piece.size + ' bytes' : '';
    logEl.dispatchEvent(new CustomEvent('log:lines', { detail: { final: cfg.taskFinal } }));
  }

  var timer = null, busy = false;
  // A final task logs nothing more: its last read had all of it, an
  // unfinished last line included.
  function logDone() { return !cfg.task || (cfg.taskFinal && (cfg.end >= cfg.size || cfg.partial)); }
  async function tick() {
    if (busy) return;
    busy = true;
    try {
      var params = {};
      if (cfg.task) {
        params = { task: cfg.task, attempt: cfg.attempt, from: cfg.end, line: cfg.nextLine };
      }
      var res = await fetch(url(cfg.live, params), { headers: { accept: 'application/json' }, credentials: 'same-origin' });
      if (!res.ok) return;
      var d = await res.json();
      var head = document.getElementById('job-head');
      if (head && head.innerHTML !== d.header) head.innerHTML = d.header;
      var acts = document.getElementById('job-actions');
      if (acts && acts.innerHTML !== d.actions) acts.innerHTML = d.actions;
      if (d.tasks.length !== Object.keys(nodes).length) {
        // The pipeline file was read since the page was drawn: the graph is new.
        location.reload();
        return;
      }
      d.tasks.forEach(updateTask);
      if (d.open && cfg.follow && cfg.attempt !== null && d.open.attempt > cfg.attempt) {
        // A new attempt began: the log shown starts over with it.
        if (logEl) { logEl.textContent = ''; logEl.dispatchEvent(new CustomEvent('log:lines', { detail: { reset: true } })); }
        cfg.attempt = d.open.attempt; cfg.end = 0; cfg.size = 0; cfg.partial = false; cfg.nextLine = 1;
      } else if (d.log) {
        if (cfg.attempt === null) { cfg.attempt = d.log.attempt; }
        cfg.taskFinal = d.log.task_final;
        appendLog(d.log);
      } else if (d.open) {
        cfg.taskFinal = ['success', 'failed', 'skipped', 'cancelled'].indexOf(d.open.state) >= 0;
      }
      cfg.final = d.final;
      times();
      if (cfg.final && logDone() && timer) { clearInterval(timer); timer = null; }
    } catch (e) {
      // A failed poll is tried again at the next tick.
    } finally {
      busy = false;
    }
  }

  var earlier = document.querySelector('[data-earlier]');
  // Loads the page before the lines shown; false when there is none (or it failed).
  async function loadEarlier() {
    if (!logEl || !cfg.task || !(cfg.from > 0)) return false;
    if (earlier) earlier.disabled = true;
    try {
      var res = await fetch(url(cfg.log, { task: cfg.task, attempt: cfg.attempt, before: cfg.from }), { credentials: 'same-origin' });
      if (!res.ok) return false;
      var p = await res.json();
      logEl.insertBefore(fragment(p.html), logEl.firstChild);
      cfg.from = p.from;
      if (earlier) earlier.hidden = p.from <= 0;
      logEl.dispatchEvent(new CustomEvent('log:lines', { detail: { prepended: true, final: cfg.taskFinal } }));
      return true;
    } finally {
      if (earlier) earlier.disabled = false;
    }
  }
  // The log's tools (lib/pages/log-client.ts) load earlier pages to search them.
  if (logEl) logEl.loadEarlier = loadEarlier;
  if (earlier) earlier.addEventListener('click', loadEarlier);

  var download = document.querySelector('[data-download]');
  if (download) download.addEventListener('click', async function (ev) {
    ev.preventDefault();
    var parts = [], offset = 0, size = 0;
    do {
      var q = new URL(download.href, location.href);
      q.searchParams.set('offset', String(offset));
      var res = await fetch(q, { credentials: 'same-origin' });
      if (!res.ok) return;
      parts.push(await res.blob());
      size = Number(res.headers.get('x-log-size'));
      var end = Number(res.headers.get('x-log-end'));
      if (!(end > offset)) break;
      offset = end;
    } while (offset < size);
    var a = document.createElement('a');
    a.href = URL.createObjectURL(new Blob(parts, { type: 'text/plain' }));
    a.download = download.getAttribute('download') || 'log.txt';
    document.body.appendChild(a);
    a.click();
    setTimeout(function () { URL.revokeObjectURL(a.href); a.remove(); }, 1000);
  });

  setInterval(times, 30000);
  if (!(cfg.final && logDone())) timer = setInterval(tick, POLL_MS);
})();${LOG_SCRIPT}`;
