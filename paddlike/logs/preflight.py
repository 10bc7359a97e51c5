"""summary.json's "preflight" (the launcher's pre-flight check, issue 35) as text: the
verdict, the job's medians and every node's measured links, for `python -m paddlike.logs`.

    pre-flight check, round 0 (0.61 s): failed
      node 2 (198.18.0.3): 1.6 MB/s to node 1, median 379 MB/s
      links: median 379 MB/s, round trip 0.06 ms; each node's links (up / down, round trip):
      node 0 (198.18.0.1): to 1 412 MB/s / 398 MB/s, 0.05 ms; to 2 1.6 MB/s / 1.5 MB/s, 0.31 ms
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

MAX_NODES = 16  # nodes whose links are listed (those at fault always are)


def _rate(bytes_per_s: float) -> str:
    for unit, scale in (("GB/s", 1e9), ("MB/s", 1e6), ("kB/s", 1e3)):
        if bytes_per_s >= scale:
            v = bytes_per_s / scale
            return f"{v:.1f} {unit}" if v < 10 else f"{v:.0f} {unit}"
    return f"{bytes_per_s:.0f} B/s"


def _ms(seconds: float | None) -> str:
    if seconds is None:
        return "no answer"
    ms = seconds * 1e3
    return f"{ms:.2f} ms" if ms < 10 else f"{ms:.0f} ms"


def preflight_lines(entry: Mapping[str, object] | None) -> list[str]:
    """The check's lines, earlier rounds' checks that found something first (an elastic
    job that left a node out: `launch.health.gate.kept_with_earlier`); [] when the job ran
    none."""
    if not entry:
        return []
    out: list[str] = []
    for earlier in entry.get("earlier") or ():  # type: ignore[attr-defined]
        out.extend(_check_lines(earlier))
    return out + _check_lines(entry)


def _check_lines(entry: Mapping[str, object]) -> list[str]:
    """One round's check: its verdict, findings, notes and every node's links."""
    word = "passed" if entry.get("ok") else "failed"
    seconds = float(entry.get("seconds") or 0)  # type: ignore[arg-type]
    out = [f"pre-flight check, round {entry.get('round')} ({seconds:.2f} s): {word}"]
    out.extend(f"  {line}" for line in entry.get("findings") or ())  # type: ignore[union-attr]
    out.extend(f"  note: {line}" for line in entry.get("notes") or ())  # type: ignore[union-attr]
    nodes: Sequence[Mapping] = entry.get("nodes") or ()  # type: ignore[assignment]
    if any(n.get("links") for n in nodes):
        out.append(
            f"  links: median {_rate(float(entry.get('bandwidth_median') or 0))}, round trip "  # type: ignore[arg-type]
            f"{_ms(entry.get('rtt_median'))}; each node's links (up / down, round trip):"  # type: ignore[arg-type]
        )
    bad = set(entry.get("bad_nodes") or ())  # type: ignore[call-overload]
    shown = [n for i, n in enumerate(nodes) if i < MAX_NODES or n.get("index") in bad]
    for n in shown:
        links = "; ".join(
            f"to {f['to']} {_rate(f['up'])} / {_rate(f['down'])}, {_ms(f.get('rtt'))}"
            for f in n.get("links") or ()
        )
        gpus = f", {n['gpus']} GPUs" if n.get("gpus") is not None else ""
        if n.get("own"):
            gpus += f", {_rate(n['own'])} to itself"
        if links or gpus:
            out.append(f"  node {n.get('index')} ({n.get('host')}){gpus}: {links or 'no links'}")
    if len(shown) < len(nodes):
        out.append(f"  ({len(nodes) - len(shown)} more nodes in summary.json)")
    return out
