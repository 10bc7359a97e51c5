"""Moving a global array between any two layouts with point-to-point sends: placement
changes, and n-D boxings that no single mesh axis can do alone.

The plan is a pure function every rank computes alike: for each destination rank (in
parallel-id order), the region it needs, cut along the pieces of a set of source ranks
that tile the global array once (the source ranks whose B coordinates equal the
destination's own, when it is a source rank, so that it copies what it holds instead of
receiving it). Each rank then runs its part of the list in list order with blocking
send/recv: the earliest unfinished move always has both its ranks waiting on it, so the
schedule cannot deadlock. A P destination gets the value at coordinate 0 of its P axes
and zeros elsewhere. The source holds no P (boxing reduces it first).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .placement import Placement
from .regions import Region, intersect, local_region, region_shape
from .sbp import Sbp, broadcast, partial_sum

__all__ = ["Move", "needed_region", "plan", "run"]


@dataclass(frozen=True)
class Move:
    """Rank `src` gives rank `dst` the global `region` (src == dst: a local copy)."""

    src: int
    dst: int
    region: Region


def needed_region(
    shape: tuple[int, ...], p: Placement, nd_sbp: tuple[Sbp, ...], rank: int
) -> Region | None:
    """What `rank` holds under (p, nd_sbp); None for a P rank that holds zeros."""
    coords = p.coords(rank)
    if any(s is partial_sum and c != 0 for s, c in zip(nd_sbp, coords, strict=True)):
        return None
    as_b = tuple(broadcast if s is partial_sum else s for s in nd_sbp)
    return local_region(shape, p.hierarchy, as_b, coords)


def plan(
    shape: tuple[int, ...],
    src: Placement, src_sbp: tuple[Sbp, ...],
    dst: Placement, dst_sbp: tuple[Sbp, ...],
) -> list[Move]:  # fmt: skip
    assert partial_sum not in src_sbp, "the source of a transfer holds no partial sums"
    b_axes = [i for i, s in enumerate(src_sbp) if s is broadcast]
    moves = []
    for d in dst.ranks:
        need = needed_region(shape, dst, dst_sbp, d)
        if need is None:
            continue
        ref = src.coords(d) if src.has(d) else (0,) * src.ndim
        for o in src.ranks:
            oc = src.coords(o)
            if any(oc[i] != ref[i] for i in b_axes):
                continue
            have = local_region(shape, src.hierarchy, src_sbp, oc)
            common = intersect(need, have)
            if common is not None:
                moves.append(Move(o, d, common))
    return moves


def _index(region: Region, origin: Region) -> tuple[slice, ...]:
    """Local index of a global region (Ellipsis keeps 0-d arrays arrays)."""
    idx = tuple(slice(lo - o, hi - o) for (lo, hi), (o, _) in zip(region, origin, strict=True))
    return (*idx, Ellipsis)


def run(
    local: Any, shape: tuple[int, ...],
    src: Placement, src_sbp: tuple[Sbp, ...],
    dst: Placement, dst_sbp: tuple[Sbp, ...],
    me: int, xp: Any, dtype: Any,
) -> Any:  # fmt: skip
    """This rank's part of the plan; returns its destination piece (None outside dst)."""
    from ..collective import ops

    out = None
    out_origin: Region = ()
    if dst.has(me):
        as_b = tuple(broadcast if s is partial_sum else s for s in dst_sbp)
        full = local_region(shape, dst.hierarchy, as_b, dst.coords(me))
        out = xp.zeros(region_shape(full), dtype)
        out_origin = full
    src_origin = local_region(shape, src.hierarchy, src_sbp, src.coords(me)) if src.has(me) else ()
    for mv in plan(shape, src, src_sbp, dst, dst_sbp):
        if mv.src == me and mv.dst == me:
            out[_index(mv.region, out_origin)] = local[_index(mv.region, src_origin)]
        elif mv.src == me:
            ops.send(xp.array(local[_index(mv.region, src_origin)], order="C"), dst=mv.dst)
        elif mv.dst == me:
            buf = xp.empty(region_shape(mv.region), dtype)
            ops.recv(buf, src=mv.src)
            out[_index(mv.region, out_origin)] = buf
    return out
