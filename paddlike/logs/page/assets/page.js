(function () {
'use strict';
var T_START = performance.now();
var F = JSON.parse(document.getElementById('facts').textContent);
var COLORS = {ok: '#2e9d57', failed: '#d43c3c', killed: '#e3a21a', running: '#3a86d4',
              gone: '#7b8cb3', exited: '#7b8cb3', unknown: '#9aa0a6'};
var LABEL_W = 230, ROW_H = 20, NODE_H = 36, AXIS_H = 46, PAD_R = 110, FOOT_H = 36;
var placed = [];
var COLLAPSE_AT = 48, ODD_SHOWN = 12;
var state = readHash();
var procs = F.procs;
procs.forEach(function (p, i) { p.i = i; });
var odd = oddProcesses();
var STRAGGLERS = (F.progress && F.progress.straggler_ranks) || [];
var HUNG = F.dumps.map(function (d) { return d.odd; }).filter(function (r) { return r !== null; });
if (state.sel === null) {
  var c = procs.filter(function (p) { return p.cause; })[0] ||
    procs.filter(function (p) { return p.role === 'trainer' && HUNG.indexOf(p.rank) >= 0; })[0];
  if (c) state.sel = c.i;
}

function esc(s) {
  return String(s === null || s === undefined ? '' : s).replace(/[&<>"']/g, function (ch) {
    return {'&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;', "'": '&#39;'}[ch];
  });
}
function secs(t) {
  if (t === null || t === undefined) return '-';
  var a = Math.abs(t);
  if (a < 10) return (Math.round(t * 100) / 100) + ' s';
  if (a < 60) return t.toFixed(1) + ' s';
  var m = Math.floor(t / 60), s = Math.round(t - 60 * m);
  if (m < 60) return m + 'm' + (s < 10 ? '0' : '') + s + 's';
  var h = Math.floor(m / 60); m = m % 60;
  return h + 'h' + (m < 10 ? '0' : '') + m + 'm';
}
function clock(t) {
  var d = new Date((F.t0 + t) * 1000);
  function two(n) { return (n < 10 ? '0' : '') + n; }
  return d.getFullYear() + '-' + two(d.getMonth() + 1) + '-' + two(d.getDate()) + ' ' +
    two(d.getHours()) + ':' + two(d.getMinutes()) + ':' + two(d.getSeconds());
}
function readHash() {
  var out = {sel: null, open: {}, all: false};
  location.hash.replace(/^#/, '').split('&').forEach(function (kv) {
    var p = kv.split('=');
    if (p[0] === 'sel' && p[1] !== '') out.sel = +p[1];
    if (p[0] === 'open' && p[1]) p[1].split(',').forEach(function (n) { out.open[n] = true; });
    if (p[0] === 'all') out.all = p[1] === '1';
  });
  return out;
}
function writeHash() {
  var open = Object.keys(state.open).filter(function (k) { return state.open[k]; });
  var h = 'sel=' + (state.sel === null ? '' : state.sel) + '&open=' + open.join(',') +
    '&all=' + (state.all ? 1 : 0);
  history.replaceState(null, '', '#' + h);
}
function name(p) {
  return p.role + ' ' + (p.rank === null ? '#' + p.local : p.rank);
}
function nodeName(n, i) {
  var idx = n.index === null ? i : n.index;
  var host = n.host || n.hostname || n.log_dir;
  return 'node ' + idx + (host ? ' · ' + host : '') +
    (n.hostname && n.hostname !== host ? ' (' + n.hostname + ')' : '');
}
function majority(list) {
  var count = {}, best = null;
  list.forEach(function (p) { count[p.status] = (count[p.status] || 0) + 1; });
  Object.keys(count).forEach(function (s) { if (best === null || count[s] > count[best]) best = s; });
  return {best: best, count: count};
}
function oddProcesses() {
  var out = {}, mostly = majority(procs).best;
  var strag = (F.progress && F.progress.straggler_ranks) || [];
  var hungRank = F.dumps.map(function (d) { return d.odd; });
  procs.forEach(function (p) {
    if (p.cause || p.status !== mostly || p.error ||
        (p.role === 'trainer' && (strag.indexOf(p.rank) >= 0 || hungRank.indexOf(p.rank) >= 0)))
      out[p.i] = true;
  });
  return out;
}

// --- the header --------------------------------------------------------------------
function drawHeader() {
  var nodes = F.nodes.length, n = procs.length;
  var bits = [];
  if (F.mode) bits.push(F.mode);
  bits.push(n + ' process' + (n === 1 ? '' : 'es') + ' on ' + nodes + ' node' + (nodes === 1 ? '' : 's'));
  var starts = procs.filter(function (p) { return p.start !== null; });
  if (starts.length) bits.push('started ' + clock(0));
  bits.push(F.status === 'running' ? 'running for ' + secs(F.t1) : 'spans ' + secs(F.t1));
  var counts = majority(procs).count;
  var statusBits = Object.keys(counts).map(function (s) {
    return '<span class="chip" style="background:' + (COLORS[s] || '#999') + '">' + counts[s] +
      ' ' + esc(s) + '</span>';
  });
  document.getElementById('facts-line').innerHTML = esc(bits.join(' · ')) + ' ' + statusBits.join(' ');
  if (F.follow) {
    document.getElementById('follow-line').textContent =
      'following: this page reloads every ' + F.follow + ' s while the job runs (written ' +
      clock(F.generated - F.t0) + ')';
  }
}

// --- the timeline --------------------------------------------------------------------
function timelineRows() {
  // A large job: a closed node shows only its odd processes, and closed nodes with none
  // in a row become one line ("nodes 0–8"), so that 512 ranks fit on a screen or two.
  var rows = [], big = procs.length > COLLAPSE_AT, last = null;
  F.nodes.forEach(function (n, ni) {
    var mine = procs.filter(function (p) { return p.node === ni; });
    var open = state.all || !big || state.open[ni];
    var shown = open ? mine : mine.filter(function (p) { return odd[p.i]; });
    var key = JSON.stringify(majority(mine).count);
    if (!open && !shown.length && last && last.key === key) {
      last.nodes.push(ni); last.procs = last.procs.concat(mine); return;
    }
    last = {kind: 'node', nodes: [ni], procs: mine, open: open, key: !open && !shown.length ? key : null};
    rows.push(last);
    var hidden = 0;
    if (!open && shown.length > ODD_SHOWN) { hidden = shown.length - ODD_SHOWN; shown = shown.slice(0, ODD_SHOWN); }
    shown.forEach(function (p) { rows.push({kind: 'proc', p: p}); });
    if (shown.length) last = null;
    if (!open && hidden) {
      rows.push({kind: 'more', nodes: [ni], text: hidden + ' more odd processes: click the node to show all ' + mine.length});
    }
  });
  return rows;
}
function nodesName(list) {
  if (list.length === 1) return nodeName(F.nodes[list[0]], list[0]);
  var idx = list.map(function (i) { var n = F.nodes[i]; return n.index === null ? i : n.index; });
  return 'nodes ' + rankRanges(idx).replace(/^ranks? /, '') + ' (' + list.length + ')';
}
function niceStep(span, want) {
  var raw = span / want, p = Math.pow(10, Math.floor(Math.log10(raw))), m = raw / p;
  return p * (m < 1.5 ? 1 : m < 3.5 ? 2 : m < 7.5 ? 5 : 10);
}
function scale(width) {
  var w = Math.max(200, width - LABEL_W - PAD_R), span = F.t1 || 1;
  return function (t) { return LABEL_W + Math.max(0, Math.min(1, t / span)) * w; };
}
function axis(x, height, top) {
  var step = niceStep(F.t1 || 1, 8), out = '';
  for (var t = 0; t <= F.t1 + 1e-9; t += step) {
    var px = x(t).toFixed(1);
    out += '<line class="grid" x1="' + px + '" x2="' + px + '" y1="' + top + '" y2="' + height + '"/>' +
      '<text class="tick" x="' + px + '" y="' + (top - 6) + '" text-anchor="middle">' + secs(t) + '</text>';
  }
  return out;
}
function bands(x, height, top) {
  var out = '';
  F.rounds.forEach(function (r, i) {
    if (r.start === null) return;
    var next = F.rounds.slice(i + 1).filter(function (q) { return q.start !== null; })[0];
    var end = next ? next.start : F.t1, x1 = x(r.start), x2 = x(end);
    out += '<g class="band" data-label="' + esc(r.label) + '"><rect x="' + x1.toFixed(1) + '" y="2"' +
      '" width="' + Math.max(1, x2 - x1).toFixed(1) + '" height="' + (height - 2) + '" class="band' + (i % 2) + '"/>' +
      '<text class="band-label" x="' + (x1 + 4).toFixed(1) + '" y="14">' + esc(r.label) +
      (r.members && r.members.length ? ' · ' + r.members.length + ' nodes' : '') + '</text></g>';
    if (i > 0 && F.rounds[i - 1].membership) {
      out += mark(x(r.start), top, height, 'membership', 'node ' + F.rounds[i - 1].membership,
                  F.rounds[i - 1].ended || '');
    }
  });
  return out;
}
function mark(px, top, height, cls, label, title) {
  // Labels of marks close together go one line lower, so that none covers another.
  var right = px > LABEL_W + 160, tx = right ? px - 4 : px + 4, line = 0;
  while (placed.some(function (q) { return q[1] === line && Math.abs(q[0] - px) < 170; })) line++;
  placed.push([px, line]);
  return '<g class="mark ' + cls + '"><title>' + esc(title) + '</title><line x1="' + px.toFixed(1) +
    '" x2="' + px.toFixed(1) + '" y1="' + (top - 2) + '" y2="' + (height - FOOT_H + 4 + 13 * line) + '"/><text x="' +
    tx.toFixed(1) + '" y="' + (height - FOOT_H + 15 + 13 * line) + '" text-anchor="' + (right ? 'end' : 'start') + '">' +
    esc(label) + '</text></g>';
}
function procEnd(p) {
  // A process without a recorded end that is not running (its launcher died): its last
  // sign of life, the later of its log's last output and its progress file's last beat.
  if (p.end !== null) return p.end;
  if (p.status === 'running' || p.mtime === undefined) return F.t1;
  var prog = F.progress && p.role === 'trainer' && p.rank !== null ? F.progress.ranks[String(p.rank)] : null;
  return Math.max(p.mtime, p.start === null ? 0 : p.start, prog && prog.last !== null ? prog.last : 0);
}
function procBar(p, x, y) {
  var out = '', h = ROW_H - 8, color = COLORS[p.status] || '#999';
  var runs = (p.runs || []).slice().sort(function (a, b) { return a[0] - b[0]; });
  for (var k = 0; k + 1 < runs.length; k++) {
    var a = x(runs[k][0]), b = x(runs[k + 1][0]);
    out += '<rect class="earlier" x="' + a.toFixed(1) + '" y="' + (y + 4) + '" width="' +
      Math.max(2, b - a - 2).toFixed(1) + '" height="' + h + '"><title>earlier run (restart ' + runs[k][1] +
      (runs[k][2] !== null && runs[k][2] !== undefined ? ', round ' + runs[k][2] : '') + ')</title></rect>';
  }
  var stuck = p.role === 'trainer' && HUNG.indexOf(p.rank) >= 0;
  var slow = p.role === 'trainer' && STRAGGLERS.indexOf(p.rank) >= 0;
  if (p.start !== null) {
    var guess = p.end === null && p.status !== 'running' && p.mtime !== undefined;
    var end = procEnd(p), x1 = x(p.start), x2 = Math.max(x(end), x1 + 2);
    out += '<rect class="bar" x="' + x1.toFixed(1) + '" y="' + (y + 4) + '" width="' + (x2 - x1).toFixed(1) +
      '" height="' + h + '" fill="' + color + '"/>';
    if (guess) {
      out += '<text class="unknown-end" x="' + (x2 + 4).toFixed(1) + '" y="' + (y + 14) + '"><title>no end recorded: ' +
        'the bar ends at its last output or heartbeat</title>?</text>';
    }
    if (p.end === null && p.status === 'running') {
      out += '<polygon class="live" points="' + x2.toFixed(1) + ',' + (y + 3) + ' ' + (x2 + 6).toFixed(1) + ',' +
        (y + ROW_H / 2) + ' ' + x2.toFixed(1) + ',' + (y + ROW_H - 3) + '" fill="' + color + '"/>';
    }
    if (p.last && p.last.t !== null) {  // its last collective before a hang: who stopped first
      out += '<path class="last-life' + (p.last.first ? ' first' : '') + '" d="M' + x(p.last.t).toFixed(1) + ' ' +
        (y + 1) + 'v' + (ROW_H - 2) + '"><title>last sign of life: ' + esc(p.last.what) + ' at +' +
        secs(p.last.t) + '</title></path>';
    }
    var after = x2 + 10;  // where a label starts: past the bar, its ring, and the failure's mark
    if (p.status === 'failed') {
      var cx = x2 + 10;  // beside the bar's end, not on it (its ring and the cause's line are there)
      out += '<g class="xmark"><circle cx="' + cx.toFixed(1) + '" cy="' + (y + ROW_H / 2) + '" r="6"/>' +
        '<path d="M' + (cx - 3) + ' ' + (y + ROW_H / 2 - 3) + 'l6 6M' + (cx + 3) + ' ' + (y + ROW_H / 2 - 3) + 'l-6 6"/></g>';
      after = cx + 10;
    }
    if (slow && !stuck && !p.cause) {
      out += '<text class="straggler-label" x="' + after.toFixed(1) + '" y="' + (y + 14) + '">straggler</text>';
    }
    if (p.last && p.last.first && !stuck && !p.cause) {
      out += '<text class="first-label" x="' + after.toFixed(1) + '" y="' + (y + 14) + '">stopped first</text>';
    }
    if (stuck && !p.cause) {
      out += '<rect class="hung-ring" x="' + (x1 - 2).toFixed(1) + '" y="' + (y + 2) + '" width="' +
        (x2 - x1 + 4).toFixed(1) + '" height="' + (h + 4) + '"/>' +
        '<text class="hung-label" x="' + after.toFixed(1) + '" y="' + (y + 14) + '">stuck (hang)</text>';
    }
    if (p.cause) {
      out += '<rect class="cause-ring" x="' + (x1 - 2).toFixed(1) + '" y="' + (y + 2) + '" width="' +
        (x2 - x1 + 4).toFixed(1) + '" height="' + (h + 4) + '"/>' +
        '<text class="cause-label" x="' + after.toFixed(1) + '" y="' + (y + 14) + '">first to fail</text>';
    }
  } else if (p.mtime !== undefined) {
    var xm = x(p.mtime);
    out += '<path class="lastout" fill="' + color + '" d="M' + xm.toFixed(1) + ' ' + (y + 3) + 'l6 7l-6 7l-6 -7z">' +
      '<title>log last written (no start/end times in this directory)</title></path>';
  }
  return out;
}
function drawTimeline() {
  var box = document.getElementById('timeline-chart'), width = box.clientWidth || 1000;
  placed = [];
  var rows = timelineRows(), top = AXIS_H, y = top, x = scale(width), body = '';
  var hungRanks = F.dumps.map(function (d) { return d.odd; });
  rows.forEach(function (r) {
    if (r.kind === 'node') {
      var m = majority(r.procs), span = r.procs.filter(function (p) { return p.start !== null; });
      var summary = Object.keys(m.count).map(function (s) { return m.count[s] + ' ' + s; }).join(', ');
      body += '<g class="row node' + (r.open ? ' open' : '') + '" data-node="' + r.nodes.join(',') + '" transform="translate(0,' + y + ')">' +
        '<rect class="hit" x="0" y="2" width="' + width + '" height="' + (NODE_H - 4) + '"/>' +
        '<text class="node-label" x="6" y="16">' + (r.open ? '▾ ' : '▸ ') + esc(nodesName(r.nodes)) + '</text>' +
        '<text class="node-sum" x="20" y="30">' + r.procs.length + ' processes: ' + esc(summary) + '</text>';
      if (span.length) {
        var a = Math.min.apply(null, span.map(function (p) { return p.start; }));
        var b = Math.max.apply(null, span.map(procEnd));
        body += '<rect class="node-span" x="' + x(a).toFixed(1) + '" y="15" width="' +
          Math.max(2, x(b) - x(a)).toFixed(1) + '" height="6" fill="' + (COLORS[m.best] || '#999') + '"/>';
      }
      body += '</g>';
      y += NODE_H;
    } else if (r.kind === 'more') {
      body += '<text class="more" data-node="' + r.nodes.join(',') + '" x="' + (LABEL_W + 6) + '" y="' + (y + 14) + '">' + esc(r.text) + '</text>';
      y += ROW_H;
    } else {
      var p = r.p, cls = 'row proc status-' + p.status + (p.cause ? ' cause' : '') + (state.sel === p.i ? ' selected' : '') +
        (p.role === 'trainer' && hungRanks.indexOf(p.rank) >= 0 ? ' hung-odd' : '') +
        (p.role === 'trainer' && STRAGGLERS.indexOf(p.rank) >= 0 ? ' straggler' : '');
      body += '<g class="' + cls + '" data-i="' + p.i + '" data-rank="' + (p.rank === null ? '' : p.rank) + '" data-status="' +
        esc(p.status) + '" transform="translate(0,' + y + ')"><rect class="hit" x="0" y="0" width="' + width +
        '" height="' + ROW_H + '"/><text class="label" x="22" y="14">' + esc(name(p)) +
        (p.exit ? ' <tspan class="exit">(' + esc(p.exit) + ')</tspan>' : '') + '</text>' +
        '<circle cx="12" cy="10" r="4" fill="' + (COLORS[p.status] || '#999') + '"/>' + procBar(p, x, 0) + '</g>';
      y += ROW_H;
    }
  });
  var height = y + FOOT_H, over = '';
  over += axis(x, height, top);
  var marks = '';
  if (F.cause && F.cause.t !== null && F.cause.t !== undefined) {
    marks += mark(x(F.cause.t), top, height, 'cause-line', 'root cause at ' + secs(F.cause.t), F.cause.reason);
  }
  F.dumps.forEach(function (d) {
    marks += mark(x(d.t), top, height, 'dump', 'stacks taken' + (d.odd !== null ? ' (rank ' + d.odd + ')' : ''),
                  d.summary.join('\n'));
  });
  if (F.status === 'running') marks += mark(x(F.t1), top, height, 'now', 'now', 'when this page was written');
  box.innerHTML = '<svg id="timeline-svg" width="' + width + '" height="' + height + '" role="img" aria-label="timeline">' +
    bands(x, height, top) + over + body + marks + '</svg>';
  var note = document.getElementById('timeline-note'), untimed = procs.filter(function (p) { return p.start === null; });
  note.hidden = !untimed.length;
  note.textContent = untimed.length ? untimed.length + ' of ' + procs.length + ' processes have no start or end time ' +
    '(a directory written by Paddle\'s launcher records none): ◆ marks when each one\'s log last changed.' : '';
  var toggle = document.getElementById('toggle-all');
  toggle.hidden = procs.length <= COLLAPSE_AT;
  toggle.textContent = state.all ? 'Group by node (odd ones only)' : 'Show all ' + procs.length + ' processes';
}

// --- details ---------------------------------------------------------------------------
function row(k, v) {
  return v === null || v === undefined || v === '' ? '' : '<tr><th>' + esc(k) + '</th><td>' + esc(v) + '</td></tr>';
}
function drawDetail() {
  var box = document.getElementById('detail');
  if (state.sel === null || !procs[state.sel]) {
    box.innerHTML = '<p class="hint">Click a row for its command, exit code, log file, first error and the end of its log.</p>';
    return;
  }
  var p = procs[state.sel], n = F.nodes[p.node], prog = F.progress && p.role === 'trainer' && p.rank !== null ?
    F.progress.ranks[String(p.rank)] : null;
  var html = '<h3><span class="dot" style="background:' + (COLORS[p.status] || '#999') + '"></span>' + esc(name(p)) +
    ' <small>' + esc(p.status) + (p.cause ? ' · first to fail' : '') + '</small></h3><table class="kv">' +
    row('node', nodeName(n, p.node)) + row('local index', p.local) + row('pid', p.pid) +
    row('exit', p.exit || (p.status === 'running' ? 'still running' : '')) +
    row('started', p.start === null ? null : clock(p.start) + ' (+' + secs(p.start) + ')') +
    row('ran for', p.ran) + row('restarts', p.restarts || null) + row('log', p.log) + row('first error', p.error) +
    row('last sign of life', p.last ? p.last.what + (p.last.t === null ? '' : ' at +' + secs(p.last.t)) : null) +
    row('command', p.cmd) + '</table>';
  if (prog) {
    html += '<table class="kv">' + row('step', prog.step) + row('heartbeats', prog.beats) + row('collectives', prog.ops) +
      row('last activity', '+' + secs(prog.last)) + row('time per step', prog.step_time ? secs(prog.step_time) : null) +
      '</table>';
    if (prog.flight.length) {
      html += '<div class="sub">last operations</div><pre class="flight">' +
        prog.flight.slice(-8).map(flightText).map(esc).join('\n') + '</pre>';
    }
  }
  const logName = esc(p.log.split('/').pop());
  html += p.tail.length
    ? '<div class="sub">last ' + (p.tail.length === 1 ? 'line' : p.tail.length + ' lines') + ' of ' + logName +
      '</div><pre class="tail">' + p.tail.map(esc).join('\n') + '</pre>'
    : '<div class="sub">' + logName + ' is empty (this run)</div>';
  box.innerHTML = html;
}
function flightText(e) {
  // [n, group_seq, op, nbytes, dtype, peer, group, start, end, state]
  var size = e[3] ? ' ' + e[3] + ' B ' + e[4] : '';
  var when = e[9] === 'running' ? 'running since +' + secs(e[7]) : e[9] + ' +' + secs(e[8] === null ? e[7] : e[8]);
  return '#' + e[1] + ' ' + e[2] + size + (e[5] >= 0 ? ' peer ' + e[5] : '') + (e[6] ? ' (group ' + e[6] + ')' : '') +
    ' · ' + when;
}


// --- progress ---------------------------------------------------------------------------
function drawProgress() {
  var sec = document.getElementById('progress');
  if (!F.progress) { sec.hidden = true; return; }
  sec.hidden = false;
  var P = F.progress, ranks = Object.keys(P.ranks).map(Number).sort(function (a, b) { return a - b; });
  var notes = P.stragglers.concat(P.mismatch);
  document.getElementById('progress-notes').innerHTML = notes.length ?
    '<ul class="warn">' + notes.map(function (l) { return '<li>' + esc(l) + '</li>'; }).join('') + '</ul>' :
    '<p class="hint">No stragglers and no disagreement between the flight records.</p>';
  var strag = P.straggler_ranks, width = document.getElementById('progress-lines').clientWidth || 900;
  var x = scale(width), H = 220, top = AXIS_H, maxN = 1, lines = '';
  var history = ranks.some(function (r) { return P.ranks[r].steps; });
  ranks.forEach(function (r) {
    var pts = history ? P.ranks[r].steps || [] : P.ranks[r].flight.map(function (e) { return [e[8] === null ? e[7] : e[8], e[0]]; });
    pts.forEach(function (q) { maxN = Math.max(maxN, q[1]); });
  });
  var minN = maxN;
  ranks.forEach(function (r) {
    var pts = history ? P.ranks[r].steps || [] : P.ranks[r].flight.map(function (e) { return [e[8] === null ? e[7] : e[8], e[0]]; });
    pts.forEach(function (q) { minN = Math.min(minN, q[1]); });
  });
  if (minN >= maxN) minN = 0;
  function y(n) { return top + (H - top - 10) * (1 - (n - minN) / (maxN - minN)); }
  ranks.forEach(function (r) {
    var pts = history ? P.ranks[r].steps || [] : P.ranks[r].flight.map(function (e) { return [e[8] === null ? e[7] : e[8], e[0]]; });
    if (!pts.length) return;
    var d = pts.map(function (q) { return x(q[0]).toFixed(1) + ',' + y(q[1]).toFixed(1); }).join(' ');
    var slow = strag.indexOf(r) >= 0, stuck = HUNG.indexOf(r) >= 0;
    if (pts.length === 1) {  // one sample so far: a dot, not a line
      lines += '<circle class="pdot' + (slow ? ' slow' : '') + (stuck ? ' stuck' : '') + '" data-rank="' + r + '" r="3" cx="' +
        x(pts[0][0]).toFixed(1) + '" cy="' + y(pts[0][1]).toFixed(1) + '"><title>rank ' + r + '</title></circle>';
      return;
    }
    lines += '<polyline class="pline' + (slow ? ' slow' : '') + (stuck ? ' stuck' : '') + '" data-rank="' + r + '" points="' + d + '"><title>rank ' + r +
      '</title></polyline>';
  });
  document.getElementById('progress-lines-title').textContent = history ?
    'steps over time, one line per rank (sampled while following)' :
    'collectives over time, one line per rank (the flight record: each rank\'s last operations)';
  document.getElementById('progress-lines').innerHTML = '<svg width="' + width + '" height="' + H + '">' + axis(x, H, top) +
    '<text class="tick" x="' + (LABEL_W - 8) + '" y="' + (y(maxN) + 4) + '" text-anchor="end">' + (history ? 'step ' : 'collective #') + maxN + '</text>' +
    '<text class="tick" x="' + (LABEL_W - 8) + '" y="' + (y(minN) + 4) + '" text-anchor="end">' + minN + '</text>' +
    lines + '</svg>';
  // step per rank: a column per rank
  var maxStep = Math.max.apply(null, ranks.map(function (r) { return P.ranks[r].step; }).concat([1]));
  var w2 = width - LABEL_W - PAD_R, bw = Math.max(1, Math.min(48, w2 / ranks.length)), cols = '';
  ranks.forEach(function (r, k) {
    var s = P.ranks[r].step, h = 90 * s / maxStep, slow = strag.indexOf(r) >= 0;
    cols += '<rect class="col' + (slow ? ' slow' : '') + '" data-rank="' + r + '" x="' + (LABEL_W + k * bw).toFixed(1) +
      '" y="' + (100 - h).toFixed(1) + '" width="' + Math.max(1, bw - (bw > 3 ? 1 : 0)).toFixed(1) + '" height="' +
      Math.max(1, h).toFixed(1) + '"><title>rank ' + r + ': step ' + s + ', ' + P.ranks[r].ops + ' collectives</title></rect>';
  });
  document.getElementById('progress-steps').innerHTML = '<svg width="' + width + '" height="118">' +
    '<text class="tick" x="' + (LABEL_W - 8) + '" y="16" text-anchor="end">step ' + maxStep + '</text>' +
    '<text class="tick" x="' + (LABEL_W - 8) + '" y="100" text-anchor="end">0</text>' + cols +
    '<text class="tick" x="' + LABEL_W + '" y="114">rank ' + ranks[0] + '</text><text class="tick" x="' +
    (LABEL_W + ranks.length * bw) + '" y="114" text-anchor="end">rank ' + ranks[ranks.length - 1] + '</text></svg>';
  drawFlightTable(ranks);
}
function drawFlightTable(ranks) {
  var any = ranks.some(function (r) { return F.progress.ranks[r].flight.length; });
  document.getElementById('flight-title').hidden = !any;
  document.getElementById('flight-table').hidden = !any;
  if (!any) return;
  var groups = {}, order = [];
  ranks.forEach(function (r) {
    var f = F.progress.ranks[r].flight, last = f.length ? f[f.length - 1] : null;
    var key = last ? last[1] + ' ' + last[2] + ' ' + last[6] + ' ' + last[9] : 'none';
    if (!groups[key]) { groups[key] = []; order.push(key); }
    groups[key].push(r);
  });
  order.sort(function (a, b) { return groups[a].length - groups[b].length || groups[a][0] - groups[b][0]; });
  var html = '<table class="flights"><tr><th>ranks</th><th>last operations (newest last)</th></tr>';
  order.forEach(function (key) {
    var rs = groups[key], f = F.progress.ranks[rs[0]].flight.slice(-4);
    var running = f.length && f[f.length - 1][9] !== 'done';
    html += '<tr class="' + (rs.length < ranks.length && rs.length <= ranks.length / 2 ? 'odd' : '') + (running ? ' running' : '') + '">' +
      '<td>' + esc(rankRanges(rs)) + (rs.length > 1 ? ' <small>(' + rs.length + ')</small>' : '') + '</td><td><pre>' +
      (f.length ? f.map(flightText).map(esc).join('\n') : '(no collectives recorded)') + '</pre></td></tr>';
  });
  document.getElementById('flight-table').innerHTML = html + '</table>';
  document.getElementById('flight-title').textContent = F.dumps.length || (F.cause && /hang|no progress/.test(F.report)) ?
    'Last operations at the hang' : 'Last operations';
}
function rankRanges(rs) {
  var out = [], i = 0;
  while (i < rs.length) {
    var j = i;
    while (j + 1 < rs.length && rs[j + 1] === rs[j] + 1) j++;
    out.push(i === j ? String(rs[i]) : rs[i] + '–' + rs[j]);
    i = j + 1;
  }
  return (rs.length === 1 ? 'rank ' : 'ranks ') + out.join(', ');
}


// --- hangs and nodes ----------------------------------------------------------------------
function drawDumps() {
  var sec = document.getElementById('dumps');
  if (!F.dumps.length) { sec.hidden = true; return; }
  sec.hidden = false;
  document.getElementById('dump-list').innerHTML = F.dumps.map(function (d) {
    return '<div class="dump-entry"><div class="sub">stacks taken at +' + secs(d.t) + ' · ' + esc(d.dir) + '</div><pre>' +
      d.summary.map(esc).join('\n') + '</pre></div>';
  }).join('');
}
function drawNodes() {
  document.getElementById('node-list').innerHTML = '<table class="nodes"><tr><th>node</th><th>status</th>' +
    '<th>exit</th><th>log directory</th><th>notes</th></tr>' + F.nodes.map(function (n, i) {
      return '<tr><td>' + esc(nodeName(n, i)) + '</td><td>' + esc(n.status) + '</td><td>' +
        esc(n.exit_code === null ? '' : n.exit_code) + '</td><td>' + esc(n.log_dir) + '</td><td>' +
        n.notes.map(esc).join('<br>') + '</td></tr>';
    }).join('') + '</table>';
}

// --- events -----------------------------------------------------------------------------
var tip = document.getElementById('tip');
function procOf(el) {
  var g = el.closest ? el.closest('g.proc') : null;
  return g ? procs[+g.getAttribute('data-i')] : null;
}
document.getElementById('timeline-chart').addEventListener('click', function (e) {
  var g = e.target.closest('g.node, text.more');
  if (g) {
    var list = g.getAttribute('data-node').split(','), was = state.all || procs.length <= COLLAPSE_AT || state.open[list[0]];
    if (state.all) { state.all = false; F.nodes.forEach(function (n, i) { state.open[i] = true; }); }
    list.forEach(function (ni) { state.open[ni] = !was; });
    writeHash(); drawTimeline(); return;
  }
  var p = procOf(e.target);
  if (p) { state.sel = p.i; writeHash(); drawTimeline(); drawDetail(); }
});
document.getElementById('timeline-chart').addEventListener('mousemove', function (e) {
  var p = procOf(e.target);
  if (!p) { tip.hidden = true; return; }
  tip.hidden = false;
  tip.innerHTML = '<b>' + esc(name(p)) + '</b> ' + esc(p.status) + (p.exit ? ' (' + esc(p.exit) + ')' : '') +
    (p.ran ? ' · ran ' + esc(p.ran) : '') + (p.error ? '<br>' + esc(p.error) : '') + '<br><i>click for details</i>';
  tip.style.left = Math.min(e.clientX + 14, window.innerWidth - 380) + 'px';
  tip.style.top = (e.clientY + 14) + 'px';
});
document.getElementById('timeline-chart').addEventListener('mouseleave', function () { tip.hidden = true; });
document.getElementById('toggle-all').addEventListener('click', function () {
  state.all = !state.all; writeHash(); drawTimeline();
});
var resizeTimer = null;
window.addEventListener('resize', function () {
  clearTimeout(resizeTimer);
  resizeTimer = setTimeout(function () { drawTimeline(); drawLateness(); drawProgress(); }, 100);
});
if (F.follow && F.status === 'running') {
  setTimeout(function () { location.reload(); }, F.follow * 1000);
}

function drawLateness() { window.PaddlikeHeatmap.draw(F, secs); }  // heatmap.js

drawHeader(); drawTimeline(); drawDetail(); drawLateness(); drawProgress(); drawDumps(); drawNodes();
document.body.setAttribute('data-draw-ms', (performance.now() - T_START).toFixed(1));
document.body.setAttribute('data-drawn', '1');
})();
