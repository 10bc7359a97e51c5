"""The straggler check's findings in words (`python -m paddlike.logs --stragglers`): node
0's table as summary.json keeps it (`lateness.Lateness.to_json`), or, in another node's
log directory, where the check runs and what node 0 told that node it found."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from paddlike.logs.lateness import Row, node_label, rows_from_json, seconds_text

__all__ = ["relayed_lines", "summary_lines", "table_lines"]


def table_lines(rows: Sequence[Row], nodes: Sequence[Row], window: int) -> list[str]:
    """`python -m paddlike.logs --stragglers`: per rank (nodes before them), the share of
    last arrivals, median and p90 lateness; the stragglers (rank or node) first, marked
    with *. Columns are as wide as their longest entry (long hostnames); a node's row
    names the node once, in "who"."""
    if not rows:
        return ["no collective was compared across ranks (none ran, or one rank only)"]
    ordered = sorted([*nodes, *rows], key=lambda r: not r.straggler)  # stable: nodes first
    node_of = [r.node if r.rank >= 0 else "" for r in ordered]
    who_w = max(12, *(len(r.who) + 2 for r in ordered))
    node_w = max(14, *(len(n) + 2 for n in node_of))
    head = f"{'':2}{'who':<{who_w}}{'node':<{node_w}}{'last':>6}{'median':>10}{'p90':>10}  log"
    lines = [f"lateness at the last {window} collectives (time after the first arrival):", head]
    for r, node in zip(ordered, node_of, strict=True):
        mark = "* " if r.straggler else "  "
        lines.append(
            f"{mark}{r.who:<{who_w}}{node:<{node_w}}{r.last_share:>6.0%}"
            f"{'+' + seconds_text(r.median):>10}{'+' + seconds_text(r.p90):>10}  {r.log}"
        )
    return lines


def summary_lines(table: Mapping[str, object] | None) -> list[str]:
    """summary.json's "stragglers" in words: who was named, then the table; on a node
    other than node 0 (`relayed`), where the check runs and what node 0 found."""
    if not table:
        return [
            "no straggler check compared collectives in this job (--straggler_check 0, "
            "no collective, TORCH_FR_BUFFER_SIZE=0 turning torch's flight recorder off, or "
            "the job ended before the first check)"
        ]
    if "decided_on" in table:
        return relayed_lines(table)
    ranks, nodes = rows_from_json(table)
    window = table.get("window")
    named = table.get("named")
    lines = [str(x) for x in named] if isinstance(named, list) and named else ["no straggler"]
    lines += _excluded_lines(table.get("excluded"))
    return [*lines, *table_lines(ranks, nodes, window if isinstance(window, int) else 0)]


def _excluded_lines(excluded: object) -> list[str]:
    lines = []
    for item in excluded if isinstance(excluded, list) else []:
        if isinstance(item, dict) and item.get("node"):
            index = item.get("index")
            node = str(item["node"])
            who = node_label(node, {node: index} if isinstance(index, int) else {})
            lines.append(
                f"excluded: {who} left the job (--on_straggler exclude): {item.get('line', '')}"
            )
    return lines


def relayed_lines(table: Mapping[str, object]) -> list[str]:
    """A node other than node 0: summary.json's "stragglers" is what node 0 told it
    (`run.stragglerwatch`: ``{"decided_on": {"node": 0, "host": ...}, "heard": null |
    {"time", "check", "named", "excluded"}}``): where the check runs, its last finding
    this node heard of, and where the table is."""
    import time

    decided = table.get("decided_on")
    host = str(decided.get("host") or "") if isinstance(decided, dict) else ""
    who = node_label(host, {host: 0}) if host else "node 0"
    lines = [
        f"the straggler check runs on {who}: it compares every node's ranks (this node "
        "sends it its ranks' collectives)"
    ]
    heard = table.get("heard")
    if isinstance(heard, dict):
        when = heard.get("time")
        at = time.strftime("%H:%M:%S", time.localtime(when)) if isinstance(when, float) else "?"
        lines.append(f"its check {heard.get('check')} at {at}, the last this node heard of:")
        named = heard.get("named")
        lines += [str(x) for x in named] if isinstance(named, list) and named else ["no straggler"]
        lines += _excluded_lines(heard.get("excluded"))
    else:
        lines.append(
            "no finding of node 0's reached this node (the job ended before node 0's first "
            "check, or before this node's next one)"
        )
    lines.append(
        f"the table (every rank's lateness) is in {who}'s log directory: "
        "python -m paddlike.logs DIR --stragglers there"
    )
    return lines
