"""The check over the job's store: each node serves probes, measures its `targets`,
publishes its figures, reads every node's and judges them (`verdict.judge`), so that
every node reaches the same verdict. Keys, per round ``r`` and node ``i``:

| key                          | written by | value                                  |
| ---------------------------- | ---------- | -------------------------------------- |
| ``preflight/<r>/port/<i>``   | node i     | its probe server's port (decimal)      |
| ``preflight/<r>/fig/<i>``    | node i     | its `NodeReport` (JSON)                |
| ``preflight/<r>/again/<k>/<i>`` | node i  | its look k (up to `LOOKS`) at the links|
|                              |            | still slow, when any is (`recheck`)    |
| ``preflight/<r>/read/<i>``   | node i     | it read every figure (a failing job's  |
|                              |            | store stays up until all have)         |

Per node: 1 port, 1 report and 1 mark written, its targets' ports (2) and every
node's report read in one `get_all` call (each further look, only while some link
looks slow: 1 read of the few measurers' reports, and 1 write and 1 read by them):
the calls are constant as the job grows, the bytes read grow with the number of nodes
(a report is ~200 bytes), like the rendezvous's world.
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence

from paddlike.distributed.store import StoreError
from paddlike.launch.health.limits import Limits
from paddlike.launch.health.probe import LinkFigure, ProbeServer, measure_link
from paddlike.launch.health.verdict import NodeReport, suspect_pairs, targets
from paddlike.launch.peers.kv import KV, get_all, wait_keys

LINK_SECONDS = 0.25  # per link measured, both directions together (--preflight on)
FULL_SECONDS = 1.0  # --preflight full
OWN_SECONDS = 0.1  # this node to itself, after its links (its best figure counts)
LOOKS = 3  # more looks at the links still slow: a busy CPU passes, a slow link stays slow
READ_GRACE = 5.0  # seconds a node waits for the others to read the figures


class PreflightError(Exception):
    """The check could not finish (a node never published its figures)."""


def port_key(round_: int, i: int) -> str:
    return f"preflight/{round_}/port/{i}"


def figures_key(round_: int, i: int) -> str:
    return f"preflight/{round_}/fig/{i}"


def second_key(round_: int, i: int, look: int = 0) -> str:
    return f"preflight/{round_}/again/{look}/{i}"


def read_key(round_: int, i: int) -> str:
    return f"preflight/{round_}/read/{i}"


def encode_report(r: NodeReport) -> bytes:
    links = [[f.b, f.up, f.down, None if f.rtt == float("inf") else f.rtt] for f in r.links]
    data = {"i": r.index, "h": r.host, "l": links, "p": list(r.problems), "g": r.gpus,
            "o": r.loop, "f": list(r.rates)}  # fmt: skip
    return json.dumps(data, separators=(",", ":")).encode()


def decode_report(raw: bytes) -> NodeReport:
    d = json.loads(raw)
    links = tuple(
        LinkFigure(d["i"], b, up, down, float("inf") if rtt is None else rtt)
        for b, up, down, rtt in d["l"]
    )
    rates = tuple(float(x) for x in d.get("f") or ())
    return NodeReport(d["i"], d["h"], links, tuple(d["p"]), d["g"], d.get("o"), rates)


def own_rate(index: int, host: str, port: int) -> float | None:
    """What this node moves to itself through its own probe server (`OWN_SECONDS`): the
    most its CPUs let any link carry right now (`verdict.is_slow`)."""
    try:
        return measure_link(index, index, host, port, OWN_SECONDS).bandwidth
    except OSError:
        return None


def measure_targets(
    index: int, hosts: Sequence[str], ports: Sequence[int], peers: Sequence[int], seconds: float
) -> tuple[LinkFigure, ...]:
    """This node's links to `peers` (one after the other); a peer that does not answer
    is a link with no bandwidth and no round trip."""
    figures = []
    for peer, port in zip(peers, ports, strict=True):
        try:
            figures.append(measure_link(index, peer, hosts[peer], port, seconds))
        except OSError:
            figures.append(LinkFigure(index, peer, 0.0, 0.0, float("inf")))
    return tuple(figures)


def exchange(
    kv: KV,
    round_: int,
    index: int,
    hosts: Sequence[str],
    problems: Sequence[str],
    gpus: int | None,
    *,
    timeout: float,
    limits: Limits | None = None,
    links: bool = True,
    seconds: float = LINK_SECONDS,
    rates: tuple[float, ...] = (),
) -> list[NodeReport]:
    """Serve, measure, publish and read: every node's report, in node order. Links that
    look slow are measured again (`recheck`) before anything is judged.

    PreflightError naming the nodes whose figures did not come within `timeout`."""
    n = len(hosts)
    peers = targets(index, n) if links else ()
    server = ProbeServer(hosts[index], allowed=set(hosts)) if links else None
    try:
        measured: tuple[LinkFigure, ...] = ()
        if server is not None:
            kv.set(port_key(round_, index), str(server.port))
            if peers:
                raw = _get(kv, [port_key(round_, p) for p in peers], timeout, peers, hosts)
                ports = [int(x) for x in raw]
                measured = measure_targets(index, hosts, ports, peers, seconds)
        loop = own_rate(index, hosts[index], server.port) if server is not None else None
        own = NodeReport(index, hosts[index], measured, tuple(problems), gpus, loop, rates)
        kv.set(figures_key(round_, index), encode_report(own))
        raw = _get(kv, [figures_key(round_, i) for i in range(n)], timeout, range(n), hosts)
        reports = [decode_report(x) for x in raw]
        for look in range(LOOKS if server is not None else 0):
            again = suspect_pairs(reports, limits or Limits())
            if not again:
                break
            reports = recheck(
                kv,
                round_,
                index,
                hosts,
                reports,
                again,
                look,
                own_port=server.port,  # type: ignore[union-attr]
                timeout=timeout,
                seconds=seconds,
            )
        return reports
    finally:  # every node's figures are in: nobody measures this node any more
        if server is not None:
            server.close()


def recheck(
    kv: KV,
    round_: int,
    index: int,
    hosts: Sequence[str],
    reports: list[NodeReport],
    again: Sequence[tuple[int, int]],
    look: int = 0,
    *,
    own_port: int,
    timeout: float,
    seconds: float,
) -> list[NodeReport]:
    """Another look: the lower end of each suspect pair measures it once more (and itself),
    while only those links are measured (a first figure may be a busy CPU's, not the
    link's). Every node computes the same `again` from the same figures, so every node
    knows who measures: those publish, and every node reads only theirs (a handful,
    whatever the job's size). Each pair then counts with the better of its figures
    (`verdict.pair_figures`)."""
    measurers = sorted({a for a, _ in again})
    mine = [b for a, b in again if a == index]
    if mine:
        raw = _get(kv, [port_key(round_, b) for b in mine], timeout, mine, hosts)
        measured = measure_targets(index, hosts, [int(x) for x in raw], mine, seconds)
        loop = own_rate(index, hosts[index], own_port)
        own = NodeReport(index, hosts[index], measured, loop=loop)
        kv.set(second_key(round_, index, look), encode_report(own))
    keys = [second_key(round_, i, look) for i in measurers]
    second = {r.index: r for r in map(decode_report, _get(kv, keys, timeout, measurers, hosts))}
    out = []
    for r in reports:
        more = second.get(r.index)
        if more is None:
            out.append(r)
            continue
        loops = [x for x in (r.loop, more.loop) if x is not None]
        out.append(r._replace(links=r.links + more.links, loop=max(loops) if loops else None))
    return out


def mark_read(kv: KV, round_: int, index: int, n: int, *, wait: bool) -> None:
    """Say this node read every figure; with `wait` (the job ends here: node 0's store
    or this node's etcd lease goes with it), wait until every node has said so."""
    try:
        kv.set(read_key(round_, index), b"1")
        if wait:
            wait_keys(kv, [read_key(round_, i) for i in range(n)], READ_GRACE)
    except StoreError:
        pass  # the others went first: nothing left to wait for


def _get(
    kv: KV, keys: list[str], timeout: float, nodes: Sequence[int], hosts: Sequence[str]
) -> list[bytes]:
    start = time.monotonic()
    try:
        return get_all(kv, keys, timeout)
    except StoreError as exc:
        missing = [
            f"node {i} ({hosts[i]})" for i, k in zip(nodes, keys, strict=True) if _absent(kv, k)
        ]
        waited = time.monotonic() - start
        raise PreflightError(
            f"pre-flight check: no figures from {', '.join(missing) or 'some nodes'} "
            f"within {waited:.0f} s ({exc}); every node needs the same --preflight"
        ) from exc


def _absent(kv: KV, key: str) -> bool:
    try:
        return kv.try_get(key) is None
    except StoreError:
        return True


__all__ = ["Limits", "PreflightError", "exchange", "mark_read"]
