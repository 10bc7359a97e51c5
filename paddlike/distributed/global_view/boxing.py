"""Boxing: converting a global array's local piece from one SBP to another, by the
collective each conversion maps to (OneFlow's boxing), over one placement axis at a time.

    from \\ to   S(j)                  B                 P
    S(i)        all_to_all (i != j)   all_gather        own piece in place, zeros elsewhere
    B           local slice           -                 parallel id 0 keeps it, others zeros
    P           reduce_scatter        all_reduce        -

Uneven pieces (n // k, the first n % k one more) are padded to the largest piece for
reduce_scatter and all_to_all, whose backends need equal sizes; all_gather takes them as
they are. Outputs come from the recycling pool of buffers.py.

On an n-D placement an axis is converted with its group (the ranks that share every
other coordinate) when no later axis splits a dim the conversion touches; the later
axes are converted first, so (S(0), S(0)) -> (B, B) is two all_gathers. What no single
axis can do (e.g. (S(0), S(1)) -> (S(1), S(0))) reduces the P axes with all_reduce and
then moves pieces point to point (transfer.py), as placement changes do.
"""

from __future__ import annotations

from typing import Any

from ..collective import ops
from . import buffers
from .groups import group_of
from .placement import Placement
from .regions import local_region, region_shape, split_bounds, split_sizes
from .sbp import Sbp, Split, broadcast, partial_sum
from .transfer import run as transfer

__all__ = ["axis_is_safe", "convert", "move"]


def _dims(s: Sbp) -> set[int]:
    return {s.dim} if isinstance(s, Split) else set()


def axis_is_safe(cur: tuple[Sbp, ...], axis: int, target: Sbp) -> bool:
    """Axis `axis` can be converted by its group alone: no later axis splits a dim that
    the conversion splits or gathers."""
    touched = _dims(cur[axis]) | _dims(target)
    return not any(_dims(cur[j]) & touched for j in range(axis + 1, len(cur)))


def _take(x: Any, d: int, lo: int, hi: int) -> Any:
    idx = [slice(None)] * x.ndim
    idx[d] = slice(lo, hi)
    return x[tuple(idx)]


def _padded(xp: Any, piece: Any, d: int, size: int) -> Any:
    """`piece`, contiguous and grown to `size` along d with zeros (the piece itself when
    it already is both)."""
    if piece.shape[d] == size:
        if piece.flags.c_contiguous:
            return piece
        out = buffers.empty(xp, piece.shape, piece.dtype)
        out[...] = piece
        return out
    shape = list(piece.shape)
    shape[d] = size
    out = buffers.zeros(xp, tuple(shape), piece.dtype)
    _take(out, d, 0, piece.shape[d])[...] = piece
    return out


def box_axis(
    xp: Any, x: Any, level: tuple[int, ...], k: int, c: int, group: Any, src: Sbp, dst: Sbp
) -> Any:
    """One axis of k ranks (this one at coordinate c) converts its local piece `x` from
    `src` to `dst`; `level` is the shape of the array this axis splits."""
    if src == dst:
        return x
    if isinstance(src, Split) and isinstance(dst, Split):
        return _all_to_all(xp, x, level, k, c, group, src.dim, dst.dim)
    if isinstance(src, Split):
        d = src.dim
        lo, hi = split_bounds(level[d], k, c)
        if dst is broadcast:
            return _all_gather(xp, x, level[d], k, group, d)
        out = buffers.zeros(xp, (*x.shape[:d], level[d], *x.shape[d + 1 :]), x.dtype)
        _take(out, d, lo, hi)[...] = x
        return out
    if src is broadcast:
        if isinstance(dst, Split):
            lo, hi = split_bounds(level[dst.dim], k, c)
            return _take(x, dst.dim, lo, hi)
        return x if c == 0 else xp.zeros_like(x)
    # src is P
    if dst is broadcast:
        return _all_reduce(xp, x, group)
    assert isinstance(dst, Split)
    return _reduce_scatter(xp, x, k, c, group, dst.dim)


def _all_reduce(xp: Any, x: Any, group: Any) -> Any:
    """P -> B into a new array (the input stays untouched): an out-of-place all_reduce,
    which moves the same bytes as the in-place one."""
    out = buffers.empty(xp, x.shape, x.dtype)
    src = x if x.flags.c_contiguous else xp.ascontiguousarray(x)  # (0-d stays 0-d)
    ops.all_reduce(src, group=group, out=out)
    return out


def _all_gather(xp: Any, x: Any, n: int, k: int, group: Any, d: int) -> Any:
    sizes = split_sizes(n, k)
    shape = (*x.shape[:d], n, *x.shape[d + 1 :])
    x = xp.ascontiguousarray(x)
    if d == 0:  # the pieces are contiguous slabs of the result: gather straight into it
        out = buffers.empty(xp, shape, x.dtype)
        bounds = [split_bounds(n, k, i) for i in range(k)]
        ops.all_gather([out[lo:hi] for lo, hi in bounds], x, group=group)
        return out
    pieces = [xp.empty((*x.shape[:d], m, *x.shape[d + 1 :]), x.dtype) for m in sizes]
    ops.all_gather(pieces, x, group=group)
    return xp.concatenate(pieces, axis=d)


def _reduce_scatter(xp: Any, x: Any, k: int, c: int, group: Any, d: int) -> Any:
    n = x.shape[d]
    sizes = split_sizes(n, k)
    top = sizes[0]
    bounds = [split_bounds(n, k, i) for i in range(k)]
    if d == 0 and n % k == 0 and x.flags.c_contiguous:  # equal slabs: no copies
        ins = [x[lo:hi] for lo, hi in bounds]
    else:
        ins = [_padded(xp, _take(x, d, lo, hi), d, top) for lo, hi in bounds]
    out = buffers.empty(xp, ins[0].shape, x.dtype)
    ops.reduce_scatter(out, ins, group=group)
    return out if sizes[c] == top else xp.ascontiguousarray(_take(out, d, 0, sizes[c]))


def _all_to_all(
    xp: Any, x: Any, level: tuple[int, ...], k: int, c: int, group: Any, i: int, j: int
) -> Any:
    """S(i) -> S(j): rank c sends rank r its piece's part r along j, and receives rank r's
    piece along i, part c along j; pieces padded to one shape when uneven."""
    si, sj = split_sizes(level[i], k), split_sizes(level[j], k)
    bi = [split_bounds(level[i], k, r) for r in range(k)]
    bj = [split_bounds(level[j], k, r) for r in range(k)]
    even = len(set(si)) == 1 and len(set(sj)) == 1
    shape = list(x.shape)
    shape[i], shape[j] = level[i], sj[c]
    if even and i == 0:
        return _all_to_all_rows(xp, x, tuple(shape), k, c, group, j, bi, bj)
    ins = [_padded(xp, _take(x, j, lo, hi), j, sj[0]) for lo, hi in bj]
    ins = [_padded(xp, a, i, si[0]) for a in ins]
    outs = [xp.empty_like(ins[0]) for _ in range(k)]
    ops.all_to_all(outs, ins, group=group)
    parts = [_take(_take(o, i, 0, si[r]), j, 0, sj[c]) for r, o in enumerate(outs)]
    return xp.concatenate(parts, axis=i)


def _all_to_all_rows(
    xp: Any, x: Any, shape: tuple[int, ...], k: int, c: int, group: Any, j: int,
    bi: list[tuple[int, int]], bj: list[tuple[int, int]],
) -> Any:  # fmt: skip
    """S(0) -> S(j), even pieces: what rank r receives from each rank lands in the result
    as contiguous rows, so the result is written in place. The parts sent are strided
    along j; on numpy they go as 2-D views with contiguous rows (all_to_all_rows), which
    the shared-memory path copies straight from x, so nothing is packed first."""
    out = buffers.empty(xp, shape, x.dtype)
    outs = [out[lo:hi] for lo, hi in bi]
    import numpy

    if xp is numpy:
        x = numpy.ascontiguousarray(x)
        rows = int(numpy.prod(x.shape[:j], dtype=numpy.int64))
        rest = int(numpy.prod(x.shape[j + 1 :], dtype=numpy.int64))
        wide = x.reshape(rows, x.shape[j] * rest)
        ins = [wide[:, lo * rest : hi * rest] for lo, hi in bj]
        ops.all_to_all_rows([o.reshape(ins[0].shape) for o in outs], ins, group=group)
        return out
    ins = []  # CuPy: pack the parts; this rank's own goes straight to its rows
    for r, (lo, hi) in enumerate(bj):
        if r == c:
            outs[c][...] = _take(x, j, lo, hi)
            ins.append(outs[c])
        else:
            ins.append(_padded(xp, _take(x, j, lo, hi), j, hi - lo))
    ops.all_to_all(outs, ins, group=group)
    return out


def convert(
    xp: Any, x: Any, shape: tuple[int, ...], p: Placement,
    src: tuple[Sbp, ...], dst: tuple[Sbp, ...], me: int,
) -> Any:  # fmt: skip
    """This rank's piece under `dst`, from its piece `x` under `src` (same placement)."""
    cur = list(src)
    coords = p.coords(me)

    def step(axis: int, target: Sbp, piece: Any) -> Any:
        level = region_shape(local_region(shape, p.hierarchy, cur, coords, upto=axis))
        k = p.hierarchy[axis]
        group = group_of(p.axis_ranks(me, axis)) if k > 1 else None
        if k == 1:
            out = piece  # one rank: every SBP holds the same local array
        else:
            out = box_axis(xp, piece, level, k, coords[axis], group, cur[axis], target)
        cur[axis] = target
        return out

    progress = True
    while progress and tuple(cur) != tuple(dst):
        progress = False
        for axis in reversed(range(p.ndim)):
            if cur[axis] != dst[axis] and axis_is_safe(tuple(cur), axis, dst[axis]):
                x = step(axis, dst[axis], x)
                progress = True
    if tuple(cur) == tuple(dst):
        return x
    for axis in range(p.ndim):
        if cur[axis] is partial_sum:
            x = step(axis, broadcast, x)
    return transfer(x, shape, p, tuple(cur), p, tuple(dst), me, xp, x.dtype)


def move(
    xp: Any, x: Any, shape: tuple[int, ...], dtype: Any,
    src_p: Placement, src: tuple[Sbp, ...], dst_p: Placement, dst: tuple[Sbp, ...], me: int,
) -> Any:  # fmt: skip
    """This rank's piece after a placement change (None when it is not in `dst_p`).

    Every rank of either placement calls it. The source's P axes are reduced there first
    (all_reduce), then the pieces move point to point."""
    cur = tuple(broadcast if s is partial_sum else s for s in src)
    if src_p.has(me) and cur != src:
        x = convert(xp, x, shape, src_p, src, cur, me)
    return transfer(x, shape, src_p, cur, dst_p, dst, me, xp, dtype)
