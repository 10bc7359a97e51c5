// The heat map of lateness: a row per rank, a column per collective (the newest of node 0's
// last --straggler_check window, oldest left), each cell coloured by how long after the
// first rank this rank entered that collective. The scale is fixed against the check's
// bar (the lateness over which a median counts, threshold x the step or collective time):
// a balanced job's map stays pale, a straggler's row burns. Drawn from facts.lateness
// (summary.json's "stragglers"."heat"); page.js calls PaddlikeHeatmap.draw(F), which hides
// the section where there is no map.
window.PaddlikeHeatmap = (function () {
'use strict';
// 9 levels: each a quarter of the bar; level 4 starts at the bar, 8 at twice it
var LEVELS = ['#f1f3f7', '#fcefc4', '#fadc92', '#f7bd63', '#f0913f', '#e0652e', '#c83f27',
              '#a2231e', '#701214'];
var PAD_R = 200, TOP = 20, FOOT = 30, LABEL_W = 230;  // LABEL_W: set per map (its labels)

function esc(s) {
  return String(s === null || s === undefined ? '' : s).replace(/[&<>"']/g, function (ch) {
    return {'&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;', "'": '&#39;'}[ch];
  });
}
function ms(v) {
  return v >= 10 ? Math.round(v) + ' ms' : (Math.round(v * 10) / 10) + ' ms';
}
function level(v, barMs) {
  if (v === null || v === undefined) return -1;
  return Math.max(0, Math.min(LEVELS.length - 1, Math.floor(4 * v / barMs)));
}
function label(r) {
  return 'rank ' + r.rank + (r.node ? ' · node ' + r.node : '');
}
function geometry(L, width) {
  var n = L.collectives.length, rows = L.ranks.length;
  var rowH = rows <= 16 ? 18 : rows <= 32 ? 13 : 9, longest = 0;
  L.ranks.forEach(function (r) { longest = Math.max(longest, label(r).length); });
  LABEL_W = Math.min(240, 24 + longest * (rowH >= 13 ? 7 : 5.5));
  return {n: n, rowH: rowH, cw: Math.max(1, (width - LABEL_W - PAD_R) / Math.max(1, n)),
          height: TOP + rows * rowH + FOOT};
}
function rowSvg(L, r, i, g, barMs) {
  var y = TOP + i * g.rowH, cells = '', vals = r.lateness_ms || [], k = 0;
  while (k < g.n) {  // a run of one colour is one rectangle: a calm row is a few elements
    var lv = level(vals[k], barMs), j = k;
    while (j + 1 < g.n && level(vals[j + 1], barMs) === lv) j++;
    if (lv >= 0) {
      cells += '<rect class="cell" data-level="' + lv + '" data-cols="' + (j - k + 1) + '" x="' +
        (LABEL_W + k * g.cw).toFixed(1) + '" y="' + y + '" width="' + ((j - k + 1) * g.cw).toFixed(1) +
        '" height="' + (g.rowH - 1) + '" fill="' + LEVELS[lv] + '"/>';
    }
    k = j + 1;
  }
  var med = (L.medians || {})[String(r.rank)], font = g.rowH >= 13 ? 12 : 9;
  var right = med && med[0] !== null && med[0] !== undefined ?
    '+' + ms(med[0] * 1000) + ', last ' + Math.round(100 * (med[1] || 0)) + '%' : '';
  var x2 = LABEL_W + g.n * g.cw;
  return '<g class="heat-row' + (r.straggler ? ' straggler' : '') + '" data-rank="' + r.rank + '" data-node="' +
    esc(r.node) + '"><text class="heat-label" x="' + (LABEL_W - 8) + '" y="' + (y + g.rowH - 4) +
    '" text-anchor="end" style="font-size:' + font + 'px">' + (r.straggler ? '▶ ' : '') + esc(label(r)) + '</text>' +
    cells + (r.straggler ? '<rect class="heat-ring" x="' + (LABEL_W - 2) + '" y="' + (y - 1) + '" width="' +
    (x2 - LABEL_W + 4).toFixed(1) + '" height="' + (g.rowH + 1) + '"/>' : '') +
    '<text class="heat-side" x="' + (x2 + 8).toFixed(1) + '" y="' + (y + g.rowH - 4) + '" style="font-size:' +
    Math.min(font, 11) + 'px">' + (r.straggler ? 'straggler ' : '') + esc(right) +
    '<title>median lateness, share of the collectives it entered last</title></text></g>';
}
function legend(barMs) {
  return LEVELS.map(function (c, k) {
    var from = k * barMs / 4, text = k === LEVELS.length - 1 ? '≥ ' + ms(from) : k === 0 ?
      '< ' + ms(barMs / 4) : ms(from).replace(' ms', '') + '–' + ms(from + barMs / 4);
    return '<span><i style="background:' + c + '"></i>' + esc(text) + '</span>';
  }).join('') + '<span>(blank: not in that collective\'s group)</span>';
}
function draw(F, secs) {
  var sec = document.getElementById('lateness'), L = F.lateness;
  if (!L || !L.ranks || !L.ranks.length || !L.collectives.length) { sec.hidden = true; return; }
  sec.hidden = false;
  var box = document.getElementById('lateness-map'), width = box.clientWidth || 1000;
  var g = geometry(L, width), barMs = Math.max(0.1, (L.bar || 0) * 1000), body = '';
  L.ranks.forEach(function (r, i) { body += rowSvg(L, r, i, g, barMs); });
  var foot = TOP + L.ranks.length * g.rowH + 16;
  function col(c) { return c[0] + ' #' + c[1] + (c[3] !== null ? ' (+' + secs(c[3]) + ')' : ''); }
  body += '<text class="tick" x="' + LABEL_W + '" y="' + foot + '">' + esc(col(L.collectives[0])) + ' → ' +
    esc(col(L.collectives[g.n - 1])) + '</text>' +
    '<text class="tick" x="' + LABEL_W + '" y="13">' + g.n + ' collectives every rank of their group entered, oldest left</text>';
  box.innerHTML = '<svg id="lateness-svg" width="' + width + '" height="' + g.height + '" role="img" ' +
    'aria-label="lateness of each rank at each collective">' + body + '</svg>';
  var shown = L.ranks.length, total = L.ranks_total || shown;
  document.getElementById('lateness-note').textContent = 'From node 0\'s straggler check' +
    (L.check ? ' #' + L.check : '') + (L.t !== null && L.t !== undefined ? ' at +' + secs(L.t) : '') +
    ': each cell is how long after the first rank this rank entered the collective; a median over ' +
    ms(barMs) + ' counts (' + ((L.step_known ? 'the step takes ' : 'a collective every ') + ms(1000 * (L.reference || 0))) +
    ').' + (shown < total ? ' ' + shown + ' of ' + total + ' ranks shown: the latest ones.' : '') +
    (L.named.length ? '' : ' No straggler: every rank arrives about together.');
  document.getElementById('lateness-legend').innerHTML = legend(barMs);
  box.onmousemove = function (e) { tipAt(e, L, g); };
  box.onmouseleave = function () { document.getElementById('tip').hidden = true; };
}
function tipAt(e, L, g) {
  var tip = document.getElementById('tip'), svg = document.getElementById('lateness-svg');
  var rect = svg.getBoundingClientRect(), x = e.clientX - rect.left, y = e.clientY - rect.top;
  var k = Math.floor((x - LABEL_W) / g.cw), i = Math.floor((y - TOP) / g.rowH);
  if (k < 0 || k >= g.n || i < 0 || i >= L.ranks.length) { tip.hidden = true; return; }
  var r = L.ranks[i], c = L.collectives[k], v = (r.lateness_ms || [])[k];
  tip.hidden = false;
  tip.innerHTML = '<b>' + esc(label(r)) + '</b> ' + esc(r.log) + '<br>' + esc(c[0] + ' #' + c[1] + ' (' + c[2] + ')') +
    ': ' + (v === null || v === undefined ? 'not in its group' : '+' + esc(ms(v)) + ' after the first rank');
  tip.style.left = Math.min(e.clientX + 14, window.innerWidth - 380) + 'px';
  tip.style.top = (e.clientY + 14) + 'px';
}
return {draw: draw, level: level, LEVELS: LEVELS};
})();
