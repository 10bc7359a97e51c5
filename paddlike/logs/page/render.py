"""One self-contained HTML file from the page's facts: style, data and script inline.

Nothing is fetched when the page opens (no font, no library, no server): it is read
from a file, attached to an issue, opened offline. The root-cause report is in the HTML
itself, so it is there even where scripts are off; the script draws the rest from the
facts (JSON in a <script type="application/json"> element).
"""

from __future__ import annotations

import functools
import html
import json
from importlib import resources
from typing import Any

ASSETS = ("error_hook.js", "heatmap.js", "page.css", "page.html", "page.js")


@functools.cache
def asset(name: str) -> str:
    """One of the page's files in assets/ (package data, read with importlib.resources so
    that it is found in a wheel as in a checkout), with the newline the page's elements
    start with.

    error_hook.js  registered before the drawing script, so that even its syntax errors
                   are recorded on <html data-errors>
    page.css       the page's style
    page.html      the body around the drawing: a str.format template ({title}, {status},
                   {report}, {dirs})
    page.js        the drawing script: the job from the facts embedded in the page
                   (facts.py), plain JavaScript, no library; it records on <body> that it
                   drew (data-drawn, data-draw-ms), which the browser tests and
                   bench/logs_html.py read
    heatmap.js     the heat map of lateness (PaddlikeHeatmap.draw, which page.js calls),
                   ranks x collectives from --straggler_check's last check
    """
    text = (resources.files("paddlike.logs.page") / "assets" / name).read_text(encoding="utf-8")
    return "\n" + text


def _json_for_script(data: Any) -> str:
    """JSON that cannot end its <script> element early (no '<' characters left)."""
    text = json.dumps(data, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
    return text.replace("<", "\\u003c").replace("\u2028", "\\u2028").replace("\u2029", "\\u2029")


def render_page(facts: dict[str, Any], dirs: list[str]) -> str:
    """The whole page as text."""
    status = facts["status"]
    title = facts.get("job_id") or ", ".join(dirs)
    body = asset("page.html").format(
        title=html.escape(str(title)),
        status=html.escape(status),
        report=html.escape(facts["report"]),
        dirs=html.escape(", ".join(dirs)),
    )
    return (
        '<!DOCTYPE html>\n<html lang="en">\n<head>\n<meta charset="utf-8">\n'
        '<meta name="viewport" content="width=device-width, initial-scale=1">\n'
        f"<title>{html.escape(str(title))} — {html.escape(status)} (paddlike)</title>\n"
        f"<style>{asset('page.css')}</style>\n<script>{asset('error_hook.js')}</script>\n"
        f"</head>\n<body>{body}"
        f'<script type="application/json" id="facts">{_json_for_script(facts)}</script>\n'
        f"<script>{asset('heatmap.js')}</script>\n"
        f"<script>{asset('page.js')}</script>\n</body>\n</html>\n"
    )
