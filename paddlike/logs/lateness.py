"""Stragglers from arrival times: who comes last to each collective, and by how much.

In a synchronous job every collective waits for its last arrival, so every rank's step
takes as long as the slowest rank's and step times cannot tell the culprit. The arrival
skew at each collective can: a rank that enters most collectives last, well after the
first rank entered them, holds the job up. Pure functions over each rank's recent
collectives (`Arrival`: group, sequence number within the group, operation, when the rank
entered it), as paddlike's flight record and torch's flight recorder hold them; the
launcher (`run.stragglerwatch`) and `python -m paddlike.logs --stragglers` pass them in.

Clocks: a rank's lateness at a collective is its arrival minus the collective's first
arrival, so the arrival times must be on one clock. On one node they are (paddlike's
records hold monotonic times, torch's Unix times: each converted to the launcher's Unix
clock there). Ranks on other nodes carry their node's clock offset, which would make a
node whose clock runs 30 ms ahead look 30 ms late at every collective. The caller may
give the seconds to add to each rank's times (`offsets`); else, where the records hold
when each collective *ended* (paddlike's do), `clock_offsets` estimates each node's
offset from them: a collective releases every rank at about the same moment (the last
arrival completes it for all), so the median gap between a node's ends and the first
node's ends is its clock's offset, while its arrivals still show its lateness. Where no
end is recorded (torch's gloo records), the nodes' clocks are taken to agree (NTP).

The rule (`find_stragglers`), per window of the last `window` collectives every member
of their group entered (at least `MIN_COLLECTIVES` of them, else nothing is judged yet):

- a rank: it arrived last at more than `most(n)` of the window's collectives, and its
  median lateness is over `threshold` × the reference time and over `MIN_LATENESS`;
- a node (of 2 or more nodes, with 2 or more ranks): the same, for the node's first
  rank to arrive against the other nodes' first ranks: all its ranks were late together.

`most(n)` is one half, and three quarters when two candidates share the job (one of two
comes last half the time by chance). The reference time is the step's (heartbeat()'s
step time, where the script calls it), else the median time between the window's
collectives. A node named takes the place of its ranks in the report.

The map (`heat_map`, summary.json's "stragglers"."heat", the job page's heat map): each
rank's lateness at each of the window's newest `HEAT_COLLECTIVES` collectives, for at
most `HEAT_RANKS` ranks (in a larger job the latest ones: the stragglers, then by share
of last arrivals and median lateness), in rank order; a few tens of kilobytes at most.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import NamedTuple

__all__ = [
    "Arrival",
    "Lateness",
    "Row",
    "Straggler",
    "clock_offsets",
    "describe",
    "find_stragglers",
    "heat_map",
    "node_label",
    "rows_from_json",
    "seconds_text",
]

WINDOW = 200  # collectives judged per check
THRESHOLD = 0.1  # median lateness over this share of the step (or collective) time
MIN_LATENESS = 0.002  # seconds: below this a median lateness is scheduling noise
MIN_COLLECTIVES = 10  # fewer complete collectives say nothing yet (the job is starting)
HEAT_RANKS = 64  # ranks in the map at most (the latest ones, in a larger job)
HEAT_COLLECTIVES = 200  # the window's newest collectives in the map at most


class Arrival(NamedTuple):
    """A rank entered collective `seq` of `group` at `time` (seconds, see the clocks)."""

    group: str  # "paddlike:0", "torch:0": which recorder's which group
    seq: int  # the collective's number within its group: what the ranks compare
    op: str
    time: float
    end: float | None = None  # when it ended on this rank (same clock), where recorded


@dataclass(frozen=True)
class Row:
    """One rank's (or node's) lateness over the window."""

    who: str  # "rank 2", "node b"
    rank: int  # -1 for a node
    node: str
    log: str  # the rank's log file; for a node, its ranks ("ranks 4–7")
    last_share: float  # share of the window's collectives it entered last
    median: float  # seconds after each collective's first arrival
    p90: float
    collectives: int  # the window's collectives it took part in
    straggler: bool = False


@dataclass(frozen=True)
class Straggler:
    """A rank or node named: its row and the report's line."""

    row: Row
    line: str


@dataclass(frozen=True)
class Lateness:
    """One check's findings: every rank's row (stragglers first), the nodes' rows where
    the job spans nodes, the window's size and its reference time."""

    rows: list[Row]
    nodes: list[Row]
    window: int
    reference: float  # seconds: the step's, or between collectives
    step_known: bool  # the reference is heartbeat()'s step time
    stragglers: list[Straggler] = field(default_factory=list)
    bar: float = 0.0  # seconds: a median lateness over this counts (threshold × reference)
    heat: dict[str, object] | None = None  # `heat_map`'s, None before a window was judged

    def to_json(self) -> dict[str, object]:
        """summary.json's "stragglers" (plain JSON types; `rows_from_json` reads it)."""
        return {
            "window": self.window,
            "reference": self.reference,
            "step_known": self.step_known,
            "bar": round(self.bar, 6),
            "named": [s.line for s in self.stragglers],
            "ranks": [_row_json(r) for r in self.rows],
            "nodes": [_row_json(r) for r in self.nodes],
            "heat": self.heat,
        }


def most(candidates: int) -> float:
    """The share of last arrivals above which one of `candidates` is last "in most"."""
    return 0.75 if candidates <= 2 else 0.5


def find_stragglers(
    arrivals: Mapping[int, Sequence[Arrival]],
    nodes: Mapping[int, str] | None = None,
    logs: Mapping[int, str] | None = None,
    *,
    window: int = WINDOW,
    threshold: float = THRESHOLD,
    step_time: float | None = None,
    offsets: Mapping[int, float] | None = None,
    node_index: Mapping[str, int] | None = None,
) -> Lateness:
    """Each rank's lateness over the last `window` complete collectives, and who
    straggles (the module's rule). `nodes` and `logs`: each rank's node and log file;
    `offsets`: seconds added to a rank's times (its node's clock against the job's);
    `node_index`: each node's index in the job, where it has one (many nodes): the lines
    then name a node as the launcher's other lines do, "node 1 (10.0.0.2)"."""
    nodes = nodes or {}
    index = node_index or {}
    logs = logs or {}
    if offsets is None:
        offsets = clock_offsets(arrivals, nodes)
    done = _complete(arrivals, offsets)[-window:]
    if len(done) < MIN_COLLECTIVES:
        return Lateness([], [], 0, 0.0, False)
    ref = step_time if step_time and step_time > 0 else _period(done)
    bar = max(threshold * ref, MIN_LATENESS)
    rows = _rows(done, {r: f"rank {r}" for r in arrivals}, nodes, logs, bar)
    node_rows: list[Row] = []
    by_node: dict[str, list[int]] = {}
    for r in arrivals:
        by_node.setdefault(nodes.get(r, ""), []).append(r)
    if len(by_node) >= 2 and all(by_node):
        merged = [_by_node(c, nodes) for c in done]
        names = {n: node_label(n, index) for n in by_node}
        spans = {n: _ranks_words(rs) for n, rs in by_node.items()}
        node_rows = _rows(merged, names, {}, spans, bar, node_of=dict.fromkeys(names, ""))
        node_rows = [
            r if len(by_node[r.node]) >= 2 else _replace(r, straggler=False) for r in node_rows
        ]
    named_nodes = {r.node for r in node_rows if r.straggler}
    rows = [
        _replace(r, straggler=False) if r.straggler and r.node in named_nodes else r for r in rows
    ]
    what = (
        f"the step takes {seconds_text(ref)}"
        if step_time
        else f"a collective every {seconds_text(ref)}"
    )
    named = [r for r in (*node_rows, *rows) if r.straggler]
    lines = [
        Straggler(r, _line(r, len(done), what, index))
        for r in sorted(named, key=lambda r: (-r.last_share, -r.median))
    ]
    order = sorted(rows, key=lambda r: (not r.straggler, -r.last_share, -r.median, r.rank))
    heat = heat_map(done, order, named_nodes)
    return Lateness(order, node_rows, len(done), ref, bool(step_time), lines, bar, heat)


def heat_map(
    done: Sequence[_Collective], order: Sequence[Row], named_nodes: set[str] | frozenset[str]
) -> dict[str, object]:
    """summary.json's "stragglers"."heat": the lateness of the first `HEAT_RANKS` rows of
    `order` (the latest first), in rank order, at the newest `HEAT_COLLECTIVES` of `done`
    (oldest first). Each rank's row: rank, node, log, straggler (it, or its node, is
    named), lateness_ms (one per collective, milliseconds to 0.1; null where the rank is
    not in the collective's group). Each collective: [op, seq, group, first arrival]."""
    shown = sorted(order[:HEAT_RANKS], key=lambda r: r.rank)
    cols = done[-HEAT_COLLECTIVES:]
    cells: dict[int, list[float | None]] = {r.rank: [None] * len(cols) for r in shown}
    for k, c in enumerate(cols):
        first, when = c.entries[0][1], dict(c.entries)
        for rank, row in cells.items():
            t = when.get(rank)
            if t is not None:
                row[k] = round((t - first) * 1000, 1)
    return {
        "ranks_total": len(order),
        "collectives": [[c.op, c.seq, c.group, round(c.entries[0][1], 3)] for c in cols],
        "ranks": [
            {
                "rank": r.rank,
                "node": r.node,
                "log": r.log,
                "straggler": r.straggler or r.node in named_nodes,
                "lateness_ms": cells[r.rank],
            }
            for r in shown
        ],
    }


def clock_offsets(
    arrivals: Mapping[int, Sequence[Arrival]], nodes: Mapping[int, str]
) -> dict[int, float]:
    """Seconds to add to each rank's times so that every node's clock reads as the
    first node's (the node of the lowest rank): per node, the median over the collectives
    it shares with that node (at least `MIN_COLLECTIVES`, both with their ends recorded)
    of the gap between the first node's latest end and this node's latest end. {} when
    the job has one node, or too few ends were recorded."""
    if len(set(nodes.values())) < 2:
        return {}
    ends: dict[str, dict[tuple[str, int], float]] = {}
    for rank, entries in arrivals.items():
        mine = ends.setdefault(nodes.get(rank, ""), {})
        for a in entries:
            if a.end is not None:
                key = (a.group, a.seq)
                mine[key] = max(mine.get(key, a.end), a.end)
    first = nodes.get(min(arrivals), "") if arrivals else ""
    base = ends.get(first, {})
    shift: dict[str, float] = {}
    for node, mine in ends.items():
        if node == first:
            continue
        gaps = sorted(base[k] - t for k, t in mine.items() if k in base)
        if len(gaps) >= MIN_COLLECTIVES:
            shift[node] = gaps[len(gaps) // 2]
    return {r: shift[n] for r, n in nodes.items() if n in shift}


class _Collective(NamedTuple):
    """One complete collective: who entered it when, earliest first."""

    group: str
    seq: int
    op: str
    entries: list[tuple[int, float]]  # (rank, or a node's name; arrival)


def _complete(
    arrivals: Mapping[int, Sequence[Arrival]], offsets: Mapping[int, float]
) -> list[_Collective]:
    """The collectives every member of their group entered (a group's members: the ranks
    that recorded any of its collectives), oldest first by first arrival."""
    seen: dict[tuple[str, int], list[tuple[float, int]]] = {}
    ops: dict[tuple[str, int], str] = {}
    members: dict[str, int] = {}
    for rank, entries in arrivals.items():
        shift = offsets.get(rank, 0.0)
        groups: set[str] = set()
        for a in entries:
            key = (a.group, a.seq)
            got = seen.get(key)
            if got is None:
                got = seen[key] = []
                ops[key] = a.op
            got.append((a.time + shift, rank))
            groups.add(a.group)
        for g in groups:
            members[g] = members.get(g, 0) + 1
    out: list[tuple[float, _Collective]] = []
    for (g, seq), got in seen.items():
        if len(got) != members[g] or len(got) < 2:
            continue
        got.sort()
        out.append((got[0][0], _Collective(g, seq, ops[g, seq], [(r, t) for t, r in got])))
    out.sort(key=lambda x: x[0])
    return [c for _, c in out]


def _period(done: Sequence[_Collective]) -> float:
    """The median time between the window's successive collectives (first arrivals)."""
    firsts = [c.entries[0][1] for c in done]
    gaps = sorted(b - a for a, b in itertools.pairwise(firsts))
    return gaps[len(gaps) // 2] if gaps else 0.0


def _by_node(c: _Collective, nodes: Mapping[int, str]) -> _Collective:
    """A collective as its nodes entered it: each node at its first rank's arrival."""
    first: dict[str, float] = {}
    for r, t in c.entries:  # earliest first: a node's first entry is its first rank's
        first.setdefault(nodes.get(r, ""), t)
    return c._replace(entries=list(first.items()))  # type: ignore[arg-type]  # node names


def _rows(
    done: Sequence[_Collective],
    names: Mapping,
    nodes: Mapping,
    logs: Mapping,
    bar: float,
    node_of: Mapping | None = None,
) -> list[Row]:
    late: dict = {k: [] for k in names}
    last: dict = dict.fromkeys(names, 0)
    for c in done:
        first = c.entries[0][1]
        for who, t in c.entries:
            late[who].append(t - first)
        last[c.entries[-1][0]] += 1
    out = []
    share_bar = most(len(names))
    for who, values in late.items():
        if not values:
            continue
        values.sort()
        share = last[who] / len(values)
        median = values[len(values) // 2]
        p90 = values[min(len(values) - 1, math.ceil(0.9 * len(values)) - 1)]
        is_rank = node_of is None
        out.append(
            Row(
                who=names[who],
                rank=who if is_rank else -1,
                node=nodes.get(who, "") if is_rank else who,
                log=logs.get(who, ""),
                last_share=share,
                median=median,
                p90=p90,
                collectives=len(values),
                straggler=share > share_bar and median > bar,
            )
        )
    return out


def _replace(r: Row, **changes: object) -> Row:
    from dataclasses import replace

    return replace(r, **changes)  # type: ignore[arg-type]


def node_label(node: str, index: Mapping[str, int]) -> str:
    """A node as the launcher's lines name it: "node 1 (10.0.0.2)" where its index is
    known, else "node 10.0.0.2" (one node: its hostname)."""
    i = index.get(node)
    return f"node {node}" if i is None else f"node {i} ({node})"


def _line(r: Row, window: int, what: str, index: Mapping[str, int]) -> str:
    if r.rank >= 0:
        i = index.get(r.node)
        node = f"node {r.node}" if i is None else f"node {i}, {r.node}"
        where = ", ".join(x for x in (node if r.node else "", r.log) if x)
        who = f"rank {r.rank}" + (f" ({where})" if where else "")
    elif r.node in index:
        who = f"node {index[r.node]} ({r.node}; {r.log}, all late together)"
    else:
        who = f"node {r.node} ({r.log}, all late together)"
    return (
        f"straggler: {who} arrived last at {r.last_share:.0%} of the last {window} "
        f"collectives, +{seconds_text(r.median)} median ({what})"
    )


def describe(found: Lateness) -> list[str]:
    """The console's lines: one per straggler, none for a balanced job."""
    return [s.line for s in found.stragglers]


def seconds_text(seconds: float) -> str:
    """A lateness as read at a glance: 4.8 ms, 48 ms, 1.25 s, 12 s."""
    if seconds >= 10:
        return f"{seconds:.0f} s"
    if seconds >= 1:
        return f"{seconds:.2f} s"
    ms = seconds * 1000
    return f"{ms:.0f} ms" if ms >= 10 else f"{ms:.1f} ms"


def _ranks_words(ranks: Sequence[int]) -> str:
    items = sorted(ranks)
    if len(items) == 1:
        return f"rank {items[0]}"
    if items == list(range(items[0], items[-1] + 1)):
        return f"ranks {items[0]}–{items[-1]}"
    return "ranks " + ", ".join(map(str, items))


def _row_json(r: Row) -> dict[str, object]:
    return {
        "who": r.who,
        "rank": r.rank,
        "node": r.node,
        "log": r.log,
        "last_share": round(r.last_share, 4),
        "median": round(r.median, 6),
        "p90": round(r.p90, 6),
        "collectives": r.collectives,
        "straggler": r.straggler,
    }


def rows_from_json(data: Mapping[str, object]) -> tuple[list[Row], list[Row]]:
    """summary.json's "stragglers" back as rows (ranks, nodes); what is unreadable is
    left out."""
    out: tuple[list[Row], list[Row]] = ([], [])
    for key, dest in (("ranks", out[0]), ("nodes", out[1])):
        items = data.get(key)
        for item in items if isinstance(items, list) else []:
            try:
                dest.append(Row(**item))
            except TypeError:
                continue
    return out
