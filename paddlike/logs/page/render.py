"""One self-contained HTML file from the page's facts: style, data and script inline.

Nothing is fetched when the page opens (no font, no library, no server): it is read
from a file, attached to an issue, opened offline. The root-cause report is in the HTML
itself, so it is there even where scripts are off; the script draws the rest from the
facts (JSON in a <script type="application/json"> element).
"""

# ruff: noqa: E501  (the page's own CSS, HTML and JavaScript: their lines are kept whole)

from __future__ import annotations

import html
import json
from typing import Any

from paddlike.logs.page.script import ERROR_HOOK, SCRIPT

STYLE = """
:root { --fg:#1d2430; --muted:#5f6b7a; --line:#e3e7ee; --bg:#f6f8fb; --card:#fff; }
* { box-sizing: border-box; }
body { margin:0; font:14px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,"Noto Sans",sans-serif;
       color:var(--fg); background:var(--bg); }
header { padding:16px 24px 10px; background:var(--card); border-bottom:1px solid var(--line); }
h1 { font-size:20px; margin:0 0 4px; display:flex; align-items:center; gap:10px; }
h2 { font-size:15px; margin:0 0 8px; }
h3 { font-size:15px; margin:0 0 8px; display:flex; align-items:center; gap:8px; }
h3 small { color:var(--muted); font-weight:normal; }
.badge { font-size:12px; padding:2px 10px; border-radius:10px; color:#fff; text-transform:uppercase;
         letter-spacing:.04em; }
.badge.failed { background:#d43c3c; } .badge.succeeded { background:#2e9d57; }
.badge.running { background:#3a86d4; } .badge.interrupted, .badge.unknown, .badge.gone { background:#7b8cb3; }
#facts-line { color:var(--muted); }
#follow-line { color:#3a86d4; font-size:12px; }
.chip { color:#fff; border-radius:8px; padding:0 7px; font-size:12px; margin-left:2px; }
main { display:grid; grid-template-columns:minmax(0,1fr) 440px; gap:16px; padding:16px 24px; }
@media (max-width: 1100px) { main { grid-template-columns:minmax(0,1fr); } }
section, aside { background:var(--card); border:1px solid var(--line); border-radius:8px; padding:12px 14px;
                 margin-bottom:16px; min-width:0; }
aside { position:sticky; top:12px; align-self:start; max-height:calc(100vh - 24px); overflow:auto; }
pre { font:12px/1.4 ui-monospace,"SFMono-Regular",Menlo,Consolas,"DejaVu Sans Mono",monospace;
      margin:0; white-space:pre-wrap; word-break:break-word; }
#report { padding:10px 14px; border-radius:8px; border-left:5px solid #7b8cb3; background:#fff;
          margin:0 24px; margin-top:14px; border:1px solid var(--line); border-left-width:5px; }
#report.failed { border-left-color:#d43c3c; background:#fff6f6; }
#report.succeeded { border-left-color:#2e9d57; background:#f4fbf6; }
#report.running { border-left-color:#3a86d4; }
.legend { font-size:12px; color:var(--muted); display:flex; flex-wrap:wrap; gap:12px; margin-bottom:6px; }
.legend i { display:inline-block; width:14px; height:10px; border-radius:2px; margin-right:4px;
            vertical-align:middle; }
.toolbar { display:flex; justify-content:space-between; align-items:center; }
button { font:inherit; font-size:12px; padding:3px 10px; border:1px solid #c9d1dc; border-radius:6px;
         background:#fff; cursor:pointer; }
svg { display:block; font-size:12px; }
svg text { fill:var(--fg); }
.grid { stroke:#eef1f5; } .tick { fill:var(--muted) !important; font-size:11px; }
.band0 { fill:#f3f6fb; } .band1 { fill:#e9eef7; } .band-label { fill:#6a7d99 !important; font-size:11px; }
.row .hit { fill:transparent; } .row:hover .hit { fill:#f1f5fb; } .row.selected .hit { fill:#e4edfb; }
.row { cursor:pointer; }
.node .hit { fill:#eef2f7; fill-opacity:.75; } .node-label { font-weight:600; } .node-sum { fill:var(--muted) !important; font-size:11px; }
.more { fill:var(--muted) !important; font-style:italic; cursor:pointer; }
.label .exit { fill:var(--muted); } .unknown-end { fill:#7b8cb3 !important; font-weight:700; }
.bar { rx:2; } .earlier { fill:#c5ccd8; rx:2; }
.xmark circle { fill:#fff; stroke:#d43c3c; stroke-width:2; } .xmark path { stroke:#d43c3c; stroke-width:2; }
.cause-ring { fill:none; stroke:#a11f1f; stroke-width:2; rx:3; }
.cause-label { fill:#a11f1f !important; font-weight:600; }
.hung-ring { fill:none; stroke:#7a3fb0; stroke-width:2; rx:3; }
.hung-label { fill:#7a3fb0 !important; font-weight:600; }
.last-life { stroke:#222; stroke-width:2; } .last-life.first { stroke:#7a3fb0; stroke-width:3; }
.first-label { fill:#7a3fb0 !important; font-weight:600; }
.pline.stuck { stroke:#7a3fb0; stroke-opacity:1; stroke-width:2.2; }
.status-failed .label { fill:#b32626; font-weight:600; }
.hung-odd .label { fill:#7a3fb0; font-weight:600; }
.straggler .label { fill:#b8561b; font-weight:600; } .straggler-label { fill:#b8561b !important; font-weight:600; }
.mark line { stroke-width:1.5; stroke-dasharray:4 3; } .mark text { font-size:11px; font-weight:600; }
.cause-line line { stroke:#d43c3c; } .cause-line text { fill:#b32626 !important; }
.dump line { stroke:#7a3fb0; } .dump text { fill:#7a3fb0 !important; }
.membership line { stroke:#d07a00; } .membership text { fill:#a65f00 !important; }
.now line { stroke:#3a86d4; } .now text { fill:#3a86d4 !important; }
.pline { fill:none; stroke:#5b7fb8; stroke-opacity:.55; stroke-width:1.4; }
.pdot { fill:#5b7fb8; } .pdot.slow { fill:#d43c3c; } .pdot.stuck { fill:#7a3fb0; }
.pline.slow { stroke:#d43c3c; stroke-opacity:1; stroke-width:2.2; }
.col { fill:#7c98c6; } .col.slow { fill:#d43c3c; }
.warn { margin:0 0 8px; padding-left:18px; color:#8a4b00; }
.hint { color:var(--muted); margin:0; }
.sub { color:var(--muted); font-size:12px; margin:10px 0 4px; }
table { border-collapse:collapse; width:100%; }
.kv th { text-align:left; color:var(--muted); font-weight:normal; width:110px; vertical-align:top;
         padding:2px 8px 2px 0; }
.kv td { padding:2px 0; word-break:break-word; font-family:ui-monospace,Menlo,Consolas,monospace;
         font-size:12px; }
.tail, .flight { background:#0f1722; color:#e6edf3; padding:8px 10px; border-radius:6px;
                 max-height:340px; overflow:auto; }
.dot { display:inline-block; width:12px; height:12px; border-radius:50%; }
.flights td, .flights th, .nodes td, .nodes th { border-top:1px solid var(--line); padding:4px 8px;
                                                  text-align:left; vertical-align:top; }
.flights tr.odd td { background:#fff4e0; } .flights tr.running td:first-child { color:#b32626; }
.nodes td { font-size:12px; }
#tip { position:fixed; max-width:380px; background:#1d2430; color:#fff; padding:6px 9px; border-radius:6px;
       font-size:12px; pointer-events:none; z-index:5; }
footer { color:var(--muted); font-size:12px; padding:0 24px 18px; }
"""

BODY = """
<header>
  <h1>paddlike job {title} <span class="badge {status}">{status}</span></h1>
  <div id="facts-line"></div>
  <div id="follow-line"></div>
</header>
<pre id="report" class="{status}">{report}</pre>
<main>
  <div>
    <section id="timeline">
      <div class="toolbar"><h2>Timeline: every process on every node</h2>
        <button id="toggle-all" hidden></button></div>
      <div class="legend">
        <span><i style="background:#2e9d57"></i>ok</span><span><i style="background:#d43c3c"></i>failed</span>
        <span><i style="background:#e3a21a"></i>killed (stopped by the launcher)</span>
        <span><i style="background:#3a86d4"></i>running</span><span><i style="background:#7b8cb3"></i>gone (its launcher died)</span>
        <span><i style="background:#9aa0a6"></i>unknown</span><span><i style="background:#c5ccd8"></i>earlier run</span>
        <span>┆ <b style="color:#d43c3c">root cause</b> · <b style="color:#7a3fb0">stacks taken</b> ·
          <b style="color:#d07a00">membership change</b></span>
      </div>
      <p id="timeline-note" class="hint" hidden></p>
      <div id="timeline-chart"></div>
    </section>
    <section id="progress" hidden>
      <h2>Progress</h2>
      <div id="progress-notes"></div>
      <div class="sub" id="progress-lines-title"></div>
      <div id="progress-lines"></div>
      <div class="sub">step per rank (from heartbeat(); red: a straggler)</div>
      <div id="progress-steps"></div>
      <h2 id="flight-title" style="margin-top:14px">Last operations</h2>
      <div id="flight-table"></div>
    </section>
    <section id="dumps" hidden><h2>Stack dumps</h2><div id="dump-list"></div></section>
    <section id="nodes"><h2>Nodes</h2><div id="node-list"></div></section>
  </div>
  <aside id="detail"></aside>
</main>
<div id="tip" hidden></div>
<footer>written by python -m paddlike.logs --html from {dirs}</footer>
"""


def _json_for_script(data: Any) -> str:
    """JSON that cannot end its <script> element early (no '<' characters left)."""
    text = json.dumps(data, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
    return text.replace("<", "\\u003c").replace("\u2028", "\\u2028").replace("\u2029", "\\u2029")


def render_page(facts: dict[str, Any], dirs: list[str]) -> str:
    """The whole page as text."""
    status = facts["status"]
    title = facts.get("job_id") or ", ".join(dirs)
    body = BODY.format(
        title=html.escape(str(title)),
        status=html.escape(status),
        report=html.escape(facts["report"]),
        dirs=html.escape(", ".join(dirs)),
    )
    return (
        '<!DOCTYPE html>\n<html lang="en">\n<head>\n<meta charset="utf-8">\n'
        '<meta name="viewport" content="width=device-width, initial-scale=1">\n'
        f"<title>{html.escape(str(title))} — {html.escape(status)} (paddlike)</title>\n"
        f"<style>{STYLE}</style>\n<script>{ERROR_HOOK}</script>\n</head>\n<body>{body}"
        f'<script type="application/json" id="facts">{_json_for_script(facts)}</script>\n'
        f"<script>{SCRIPT}</script>\n</body>\n</html>\n"
    )
