"""The page's progress section: steps and collectives over time per rank, a column per
rank's step, and the flight records' last operations grouped by rank (facts.py's
`progress`). Part of the page's script (script.py), inside its closure: it uses the
helpers defined there (esc, secs, scale, axis, ...).
"""

# ruff: noqa: E501  (JavaScript: its lines are kept whole)

PROGRESS_SCRIPT = r"""
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

"""
