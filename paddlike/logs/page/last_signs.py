"""Each rank's last sign of life before a hang, for the page's timeline.

A hang ends with every rank killed at the same moment, so the bars alone look alike;
what tells the ranks apart is when each one last did something. That is its last
collective in the newest stack dump (stacks/<time>/stacks.json): torch's flight record
(`torch_flight`, with the time the rank entered it) or paddlike's own (`progress`).
The rank that stopped first is marked: the one the hang's report names, else the one
whose last collective came at least FIRST_MARGIN seconds before every other rank's.

    {"0": {"t": 12.4, "what": "all_reduce #5 (running)"},
     "3": {"t": 9.1, "what": "all_reduce #4 (done)", "first": True}}
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

FIRST_MARGIN = 1.0  # seconds before every other rank's last sign: "stopped first"


def newest_dump(log_dir: str) -> dict[str, Any] | None:
    """The newest stacks/<time>/stacks.json of a node directory, or None."""
    for path in sorted(Path(log_dir).glob("stacks/*/stacks.json"), reverse=True):
        try:
            return json.loads(path.read_text())
        except (OSError, ValueError):
            continue
    return None


def last_signs(dump: dict[str, Any], t0: float) -> dict[int, dict[str, Any]]:
    """Rank -> its last collective in `dump`: "t" (seconds after t0, None when the record
    has no time) and "what"; torch's record where a rank has one, else paddlike's."""
    out: dict[int, dict[str, Any]] = {}
    for rank, entry in (dump.get("progress") or {}).items():
        flight = entry.get("flight") or []
        if not flight or not str(rank).isdigit():
            continue
        e = flight[-1]
        offset = float(entry.get("created_wall", 0.0)) - float(entry.get("created_mono", 0.0))
        start = e.get("start_mono")
        t = None if start is None or not entry.get("created_wall") else start + offset - t0
        out[int(rank)] = _sign(t, e.get("op"), e.get("group_seq"), e.get("state"))
    for rank, ops in (dump.get("torch_flight") or {}).items():
        real = [op for op in ops if int(op.get("group_seq", 0)) > 0]
        if not real or not str(rank).isdigit():
            continue
        op = real[-1]
        created = op.get("created")
        t = None if created is None else float(created) - t0
        out[int(rank)] = _sign(t, op.get("op"), op.get("group_seq"), op.get("state"))
    return out


def mark_first(signs: dict[int, dict[str, Any]], odd: int | None) -> None:
    """Mark the rank that stopped first, of the whole job's `signs`: the one the hang's
    report names (`odd`), else the one whose last sign came FIRST_MARGIN s or more before
    every other's. Ranks that all wait in one collective entered it within moments of
    each other: times alone do not tell a rank that skipped it, the report does."""
    if odd is not None and odd in signs:
        signs[odd]["first"] = True
        return
    timed = sorted((s["t"], r) for r, s in signs.items() if s["t"] is not None)
    if len(timed) > 1 and timed[0][0] + FIRST_MARGIN <= timed[1][0]:
        signs[timed[0][1]]["first"] = True


def _sign(t: float | None, op: Any, seq: Any, state: Any) -> dict[str, Any]:
    return {"t": None if t is None else round(t, 3), "what": f"{op} #{seq} ({state})"}
