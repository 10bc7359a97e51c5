"""The verdict of the pre-flight check: pure functions of every node's figures, so that
every node computes the same one from the same figures (read from the job's store).

Which peers a node measures (`targets`): its neighbour on the ring of node indices and
its neighbour two along (a second, shifted ring), so each node measures 2 links and
takes part in up to 4 whatever the job's size.

The job's reference (`reference`) is the median over nodes of each node's *best* link
(its highest bandwidth, its lowest round trip): a slow node drags only its own best
figure down, so fewer than half the nodes being slow never moves the reference, where
a median over links would (in a 3-node job a slow node is in 2 of the 3 links).

A link is slow (`is_slow`) when its bandwidth (the slower direction, the better of two
measurements of one pair) is under `Limits.bandwidth` x the reference and under
`Limits.bandwidth` x what either end moves to itself (`NodeReport.loop`: a node whose
CPUs are busy moves little even to itself, and its healthy links' figures are its CPUs'),
or its round trip is over `Limits.rtt` x the reference and over `Limits.rtt_floor`.

Blame (`judge`): a node is at fault when at least 2 of its links are slow and they are
more than half of its links; a node with one slow link among fast ones is healthy. Nodes
are blamed one at a time, the one with the most slow links first, and a link to a node
at fault is explained by it: it no longer counts against the node at its other end. A
slow link with no node at fault at either end is named as a link, in a note that does
not stop the job (it cannot be told which end is at fault, as in a 2-node job, or a
cable between two healthy nodes, and leaving either end out may not help).

| links of node 1 (3-node job)  | node 1     | nodes 0, 2          | named            |
| ----------------------------- | ---------- | ------------------- | ---------------- |
| 1-0 slow, 1-2 slow, 0-2 fast  | at fault   | healthy (1 of 2)    | node 1           |
| 1-0 slow, 1-2 fast, 0-2 fast  | healthy    | healthy             | the link 0-1     |
"""

from __future__ import annotations

from collections.abc import Sequence

from paddlike.launch import NamedTuple
from paddlike.launch.health.limits import Limits
from paddlike.launch.health.probe import LinkFigure
from paddlike.launch.plan.world import node_label

SHIFTS = (1, 2)  # the rings: each node measures the node this many places along


class NodeReport(NamedTuple):
    """One node's figures as it publishes them."""

    index: int
    host: str
    links: tuple[LinkFigure, ...] = ()  # the links this node measured (a = index)
    problems: tuple[str, ...] = ()  # its own check's findings (`node.node_problems`)
    gpus: int | None = None  # GPUs NVML reports; None without NVML
    loop: float | None = None  # bytes/s this node moves to itself (its CPUs' limit now)
    rates: tuple[float, ...] = ()  # full, CuPy: each GPU's matmul FLOP/s (`matmul`)


class Verdict(NamedTuple):
    """The check's outcome, the same on every node."""

    bad_nodes: tuple[int, ...]  # nodes at fault, in index order
    lines: tuple[str, ...]  # one per finding, naming the figure
    bad_links: tuple[tuple[int, int], ...] = ()  # slow links no node explains
    bandwidth: float = 0.0  # the job's reference figures (bytes/s, seconds)
    rtt: float = 0.0
    notes: tuple[str, ...] = ()  # the slow links no node explains: said, not fatal

    @property
    def ok(self) -> bool:
        """No node at fault (a slow link between healthy nodes is a note: leaving either
        end out would not be known to help)."""
        return not self.bad_nodes


def targets(index: int, n: int) -> tuple[int, ...]:
    """The peers node `index` of `n` measures: one per ring, never itself, each once.

    >>> targets(0, 4), targets(3, 4), targets(1, 3), targets(0, 2), targets(0, 1)
    ((1, 2), (0, 1), (2, 0), (1,), ())
    """
    out: list[int] = []
    for shift in SHIFTS:
        peer = (index + shift) % n
        if peer != index and peer not in out:
            out.append(peer)
    return tuple(out)


def median(values: Sequence[float]) -> float:
    """The median (the mean of the middle two for an even count); 0.0 for none."""
    s = sorted(values)
    if not s:
        return 0.0
    mid = len(s) // 2
    return s[mid] if len(s) % 2 else (s[mid - 1] + s[mid]) / 2


def pair_figures(reports: Sequence[NodeReport]) -> dict[tuple[int, int], LinkFigure]:
    """Each measured pair (low index first) once: the better of its measurements (a
    pair two nodes both measured counts as fast when either measurement was)."""
    pairs: dict[tuple[int, int], LinkFigure] = {}
    for r in reports:
        for f in r.links:
            key = (min(f.a, f.b), max(f.a, f.b))
            old = pairs.get(key)
            if old is None:
                pairs[key] = f
            else:
                best_bw = max(old, f, key=lambda x: x.bandwidth)
                pairs[key] = best_bw._replace(rtt=min(old.rtt, f.rtt))
    return pairs


def reference(pairs: dict[tuple[int, int], LinkFigure]) -> tuple[float, float]:
    """(bandwidth, round trip) of the job: the medians over nodes of each node's best link."""
    best_bw: dict[int, float] = {}
    best_rtt: dict[int, float] = {}
    for (a, b), f in pairs.items():
        for node in (a, b):
            best_bw[node] = max(best_bw.get(node, 0.0), f.bandwidth)
            best_rtt[node] = min(best_rtt.get(node, float("inf")), f.rtt)
    return median(list(best_bw.values())), median(list(best_rtt.values()))


def is_slow(
    f: LinkFigure, bandwidth: float, rtt: float, limits: Limits, own: float | None = None
) -> bool:
    """`own`: the lower of what the link's two ends move to themselves. A figure close to
    it is the CPUs' (busy ends of a healthy link), not the link's."""
    if f.bandwidth < limits.bandwidth * bandwidth:
        return own is None or f.bandwidth < limits.bandwidth * own
    return f.rtt > limits.rtt * rtt and f.rtt > limits.rtt_floor


def slow_pairs(
    reports: Sequence[NodeReport], pairs: dict[tuple[int, int], LinkFigure], limits: Limits
) -> dict[tuple[int, int], LinkFigure]:
    bandwidth, rtt = reference(pairs)
    loops = {r.index: r.loop for r in reports}

    def own(k: tuple[int, int]) -> float | None:
        known = [x for x in (loops.get(k[0]), loops.get(k[1])) if x]
        return min(known) if known else None

    return {k: f for k, f in pairs.items() if is_slow(f, bandwidth, rtt, limits, own(k))}


def suspect_pairs(reports: Sequence[NodeReport], limits: Limits) -> tuple[tuple[int, int], ...]:
    """The pairs (low index first) that look slow now: each is measured once more before
    the verdict (`preflight.recheck`)."""
    return tuple(sorted(slow_pairs(reports, pair_figures(reports), limits)))


def rate(bytes_per_s: float) -> str:
    """38 MB/s, 1.1 GB/s (decimal units)."""
    for unit, scale in (("GB/s", 1e9), ("MB/s", 1e6), ("kB/s", 1e3)):
        if bytes_per_s >= scale:
            v = bytes_per_s / scale
            return f"{v:.1f} {unit}" if v < 10 else f"{v:.0f} {unit}"
    return f"{bytes_per_s:.0f} B/s"


def duration(seconds: float) -> str:
    if seconds == float("inf"):
        return "no answer"
    ms = seconds * 1e3
    return f"{ms:.2f} ms" if ms < 10 else f"{ms:.0f} ms"


def _link_text(f: LinkFigure, peer: int, bandwidth: float, rtt: float, limits: Limits) -> str:
    """What is slow about a link, with the reference: "38 MB/s to node 2, median 1.1 GB/s"."""
    if f.rtt == float("inf"):
        return f"no answer from node {peer}'s probe"
    if f.bandwidth < limits.bandwidth * bandwidth:
        return f"{rate(f.bandwidth)} to node {peer}, median {rate(bandwidth)}"
    return f"round trip {duration(f.rtt)} to node {peer}, median {duration(rtt)}"


def _worst(f: LinkFigure) -> tuple[float, float]:
    return (f.bandwidth, -f.rtt)


def judge(reports: Sequence[NodeReport], limits: Limits) -> Verdict:
    """Every node's figures in -> the nodes at fault and the lines naming each figure."""
    hosts = [""] * (max((r.index for r in reports), default=-1) + 1)
    for r in reports:
        hosts[r.index] = r.host
    pairs = pair_figures(reports)
    bandwidth, rtt = reference(pairs)
    slow = slow_pairs(reports, pairs, limits)
    lines: list[str] = []
    bad: set[int] = set()
    for r in reports:  # the node's own findings
        for problem in r.problems:
            lines.append(f"{node_label(r.index, hosts)}: {problem}")
            bad.add(r.index)
    counts = [r.gpus for r in reports if r.gpus is not None]
    usual = median(counts) if counts else 0
    for r in reports:
        if r.gpus is not None and r.gpus < usual:
            lines.append(f"{node_label(r.index, hosts)}: {r.gpus} GPUs, median {usual:g}")
            bad.add(r.index)
    for index, line in gpu_rate_lines(reports, limits, hosts):
        lines.append(line)
        bad.add(index)
    link_bad = _blame(pairs, slow)
    for node in sorted(link_bad, key=lambda i: link_bad[i]):  # in the order they were blamed
        key, f = link_bad[node][1], slow[link_bad[node][1]]
        peer = key[0] if key[1] == node else key[1]
        lines.append(f"{node_label(node, hosts)}: {_link_text(f, peer, bandwidth, rtt, limits)}")
    bad |= set(link_bad)
    unexplained = tuple(sorted(k for k in slow if not (set(k) & set(link_bad))))
    notes = []
    for a, b in unexplained:
        text = _link_text(slow[(a, b)], b, bandwidth, rtt, limits)
        notes.append(
            f"the link {node_label(a, hosts)} - {node_label(b, hosts)}: {text} "
            "(neither end is slow on its other links)"
        )
    return Verdict(tuple(sorted(bad)), tuple(lines), unexplained, bandwidth, rtt, tuple(notes))


def hidden_by_limits(reports: Sequence[NodeReport], limits: Limits) -> str:
    """The slowest link that the default thresholds would call slow and `limits` (looser
    bandwidth, rtt or rtt_floor_ms) let pass, for the healthy line; "" when none, so that a
    slow node hidden by --preflight_limits is still seen."""
    default = Limits()
    strict = limits._replace(
        bandwidth=max(limits.bandwidth, default.bandwidth),
        rtt=min(limits.rtt, default.rtt),
        rtt_floor=min(limits.rtt_floor, default.rtt_floor),
    )
    if strict == limits:
        return ""
    pairs = pair_figures(reports)
    passed = set(slow_pairs(reports, pairs, limits))
    hidden = {k: f for k, f in slow_pairs(reports, pairs, strict).items() if k not in passed}
    if not hidden:
        return ""
    hosts = [""] * (max((r.index for r in reports), default=-1) + 1)
    for r in reports:
        hosts[r.index] = r.host
    (a, b), f = min(hidden.items(), key=lambda kv: _worst(kv[1]))
    bandwidth, rtt = reference(pairs)
    return (
        f"slowest link {node_label(a, hosts)} - {node_label(b, hosts)}: "
        f"{_link_text(f, b, bandwidth, rtt, strict)}, passed only by --preflight_limits"
    )


def gpu_rate_lines(
    reports: Sequence[NodeReport], limits: Limits, hosts: Sequence[str]
) -> list[tuple[int, str]]:
    """(node, line) for each GPU whose matmul rate is under `Limits.matmul` x the median of
    every GPU's rate in the job (`--preflight full` with CuPy; nodes without figures are
    not compared). One GPU alone is compared with nothing.

    >>> r = [NodeReport(0, "a", rates=(40e12, 41e12)), NodeReport(1, "b", rates=(40e12, 9e12))]
    >>> gpu_rate_lines(r, Limits(), ["a", "b"])
    [(1, 'node 1 (b): GPU 1: 9.0 TFLOP/s matmul, median 40.0 TFLOP/s')]
    """
    from paddlike.launch.health.matmul import flops

    every = [rate for r in reports for rate in r.rates]
    if len(every) < 2:
        return []
    usual = median(every)
    return [
        (r.index, f"{node_label(r.index, hosts)}: GPU {g}: {flops(rate)} matmul, median "
         f"{flops(usual)}")
        for r in reports
        for g, rate in enumerate(r.rates)
        if rate < limits.matmul * usual
    ]  # fmt: skip


def _blame(
    pairs: dict[tuple[int, int], LinkFigure],
    slow: dict[tuple[int, int], LinkFigure],
) -> dict[int, tuple[int, tuple[int, int]]]:
    """The nodes at fault for their links -> (the order they were found, their worst
    slow link). One at a time, the node with the most slow links first: once a node is at
    fault its links are explained, so that its neighbours' slow links to it count no more."""
    blamed: dict[int, tuple[int, tuple[int, int]]] = {}
    links_of: dict[int, list[tuple[int, int]]] = {}
    for k in pairs:
        for node in k:
            links_of.setdefault(node, []).append(k)
    # only a node with 2 slow links may be at fault, and only its neighbours' counts change
    # when it is: a handful of nodes to look at, whatever the job's size
    suspects = {node for k in slow for node in k}
    while True:
        best: tuple[int, float, int, tuple[int, int]] | None = None
        for node in sorted(suspects - set(blamed)):
            mine = [k for k in links_of.get(node, ()) if not (set(k) - {node}) & set(blamed)]
            my_slow = [k for k in mine if k in slow]
            if len(my_slow) < 2 or 2 * len(my_slow) <= len(mine):
                continue
            worst = min(my_slow, key=lambda k: _worst(slow[k]))
            rank = (len(my_slow), -slow[worst].bandwidth, -node, worst)
            if best is None or rank[:3] > best[:3]:
                best = rank
        if best is None:
            return blamed
        blamed[-best[2]] = (len(blamed), best[3])
