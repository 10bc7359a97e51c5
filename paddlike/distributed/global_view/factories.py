"""Making global arrays: from the global value (`global_array`, the factories) or from
each rank's piece (`to_global`).

`global_array(data, ...)`: every rank passes the same global data and keeps its piece;
nothing is communicated. `to_global(local, ...)` (OneFlow's Tensor.to_global on a local
tensor): the piece becomes this rank's part as it is — no data moves, except for B,
where the ranks at coordinate 0 of each B axis broadcast theirs (OneFlow's rule). The
global shape is inferred from the pieces (an all_gather of their shapes and dtypes, which
also checks that the ranks agree on the placement and SBP).
"""

from __future__ import annotations

import zlib
from collections.abc import Sequence
from typing import Any

import numpy as np

from ..collective import ops
from .array import GlobalArray
from .errors import GlobalViewError
from .groups import array_module, group_of, my_rank, require_backend
from .placement import Placement
from .regions import even_global_shape, infer_global_shape, local_region
from .sbp import Sbp, broadcast, fmt, normalize, partial_sum

__all__ = ["arange", "full", "global_array", "ones", "randn", "to_global", "zeros"]

MAX_DIMS = 32
DTYPES = ("bool", "int8", "uint8", "int16", "int32", "int64", "float16", "float32", "float64")


def _check_placement(p: Any, what: str) -> Placement:
    if not isinstance(p, Placement):
        raise GlobalViewError(
            f"{what}: placement must be a placement(...), e.g. placement('cpu', ranks=[0, 1]); "
            f"got {p!r}"
        )
    require_backend(p, what)
    return p


def _zero_partial(p: Placement, nd: tuple[Sbp, ...], me: int) -> bool:
    """A P rank away from coordinate 0 holds zeros (the others hold the value)."""
    return any(s is partial_sum and c != 0 for s, c in zip(nd, p.coords(me), strict=True))


def _piece(full: Any, p: Placement, nd: tuple[Sbp, ...], me: int, xp: Any) -> Any:
    region = local_region(full.shape, p.hierarchy, nd, p.coords(me))
    piece = full[(*(slice(lo, hi) for lo, hi in region), Ellipsis)]
    if _zero_partial(p, nd, me):
        return xp.zeros(piece.shape, piece.dtype)
    return xp.array(piece, copy=True, order="C")


def global_array(
    data: Any, placement: Placement, sbp: Any = broadcast, dtype: Any = None
) -> GlobalArray:
    """A global array of value `data` (the same on every rank); each rank keeps its piece.
    With P, the rank at coordinate 0 of each P axis holds the value, the others zeros."""
    p = _check_placement(placement, "global_array")
    if type(data).__module__.split(".")[0] == "cupy":
        data = data.get()
    full = np.asarray(data, dtype=dtype)
    nd = normalize(sbp, p.ndim, full.ndim, "global_array")
    me = my_rank()
    local = _piece(full, p, nd, me, array_module(p)) if p.has(me) else None
    return GlobalArray(local, full.shape, full.dtype, p, nd)


def _fingerprint(p: Placement, nd: tuple[Sbp, ...]) -> int:
    return zlib.crc32(repr((p, fmt(nd))).encode())


def to_global(
    local: Any, placement: Placement, sbp: Any, shape: Sequence[int] | None = None,
    check_meta: bool = True,
) -> GlobalArray:  # fmt: skip
    """A global array whose piece on this rank is `local` (numpy on cpu, cupy on cuda).

    Every rank of the placement calls it. A rank outside the placement passes `shape`
    (the global shape) and gets the metadata. A GlobalArray is converted instead.
    `check_meta=False` (OneFlow's flag) skips the exchange of shapes and dtypes: the
    global shape is then `shape`, or the piece's shape times the ranks splitting each
    dim (even pieces)."""
    if isinstance(local, GlobalArray):
        return local.to_global(placement, sbp)
    p = _check_placement(placement, "to_global")
    me = my_rank()
    if not p.has(me):
        if shape is None:
            raise GlobalViewError(
                f"to_global: rank {me} is not in the placement {p} (ranks {list(p.ranks)}), "
                f"so its local array is no piece of the result; pass shape= (the global "
                f"shape) to get the array's metadata on this rank, or call it only on those "
                f"ranks"
            )
        dt = np.dtype(getattr(local, "dtype", np.float32))
        nd = normalize(sbp, p.ndim, len(shape), "to_global")
        return GlobalArray(None, tuple(shape), dt, p, nd)
    xp = array_module(p)
    if not hasattr(local, "shape") or not hasattr(local, "dtype"):
        local = xp.asarray(local)
    if p.type == "cuda" and type(local).__module__.split(".")[0] != "cupy":
        local = xp.asarray(local)
    if p.type == "cpu" and not isinstance(local, np.ndarray):
        raise GlobalViewError(
            f"to_global: a cpu placement holds numpy arrays, got {type(local).__name__}; "
            f"use a cuda placement for cupy arrays"
        )
    nd = normalize(sbp, p.ndim, local.ndim, "to_global")
    dtype = np.dtype(local.dtype)
    if dtype.name not in DTYPES:
        raise GlobalViewError(f"to_global: dtype {dtype} is not one of {', '.join(DTYPES)}")
    if local.ndim > MAX_DIMS:
        raise GlobalViewError(f"to_global: {local.ndim} dims; at most {MAX_DIMS} are supported")
    if not check_meta:
        global_shape = tuple(shape) if shape is not None else even_global_shape(
            tuple(local.shape), p.hierarchy, nd
        )  # fmt: skip
        want = local_region(global_shape, p.hierarchy, nd, p.coords(me))
        if tuple(hi - lo for lo, hi in want) != tuple(local.shape):
            raise GlobalViewError(
                f"to_global: rank {me}'s local array has shape {tuple(local.shape)}, but sbp "
                f"{fmt(nd)} of global shape {global_shape} needs "
                f"{tuple(hi - lo for lo, hi in want)} there; pass the global shape= or use "
                f"check_meta=True"
            )
        return _broadcast_b_axes(xp.array(local, copy=True, order="C"), global_shape, dtype, p, nd)
    meta = [_fingerprint(p, nd), DTYPES.index(dtype.name), local.ndim, *local.shape]
    meta += [0] * (3 + MAX_DIMS - len(meta))
    if p.size == 1:
        metas = [meta]
    else:
        mine = xp.asarray(meta, dtype=np.int64)
        outs: list[Any] = []
        ops.all_gather(outs, mine, group=group_of(p.ranks))
        metas = [[int(v) for v in o.tolist()] for o in outs]
    _check_agreement(metas, p, nd, dtype)
    shapes = [tuple(m[3 : 3 + m[2]]) for m in metas]
    global_shape = infer_global_shape(
        shapes, p.hierarchy, nd, lambda pid: p.coords(p.ranks[pid]), lambda pid: p.ranks[pid],
        "to_global",
    )  # fmt: skip
    if shape is not None and tuple(shape) != global_shape:
        raise GlobalViewError(
            f"to_global: shape={tuple(shape)} was given, but the pieces make {global_shape}"
        )
    return _broadcast_b_axes(xp.array(local, copy=True, order="C"), global_shape, dtype, p, nd)


def _broadcast_b_axes(
    out: Any, global_shape: tuple[int, ...], dtype: Any, p: Placement, nd: tuple[Sbp, ...]
) -> GlobalArray:
    """OneFlow's rule for B from local pieces: coordinate 0 of each B axis broadcasts."""
    me = my_rank()
    for axis, s in enumerate(nd):
        if s is broadcast and p.hierarchy[axis] > 1:
            group = p.axis_ranks(me, axis)
            ops.broadcast(out, src=group[0], group=group_of(group))
    return GlobalArray(out, global_shape, dtype, p, nd)


def _check_agreement(metas: list[list[int]], p: Placement, nd: tuple[Sbp, ...], dtype) -> None:
    for pid, m in enumerate(metas):
        if m[0] != metas[0][0] or (m[0] != _fingerprint(p, nd)):
            raise GlobalViewError(
                f"to_global: the ranks disagree on the placement or sbp: rank {my_rank()} "
                f"passed {p} with sbp {fmt(nd)}, rank {p.ranks[pid]} something else; every "
                f"rank of the placement must pass the same placement and sbp"
            )
    names = {p.ranks[pid]: DTYPES[m[1]] for pid, m in enumerate(metas)}
    if len(set(names.values())) > 1:
        raise GlobalViewError(
            f"to_global: the ranks' local arrays have different dtypes: {names}; cast them to "
            f"one dtype first"
        )


def _shape_arg(shape: tuple[Any, ...], what: str) -> tuple[int, ...]:
    if len(shape) == 1 and not isinstance(shape[0], int):
        shape = tuple(shape[0])
    if not all(isinstance(n, int) and not isinstance(n, bool) and n >= 0 for n in shape):
        raise GlobalViewError(f"{what}: shape {shape} must be non-negative ints")
    return tuple(shape)


def full(
    shape: Any, fill_value: Any, placement: Placement, sbp: Any = broadcast, dtype: Any = None
) -> GlobalArray:
    """Every element `fill_value` (default dtype: float32, OneFlow's)."""
    shp = _shape_arg(shape if isinstance(shape, tuple) else (shape,), "full")
    return _filled(shp, fill_value, placement, sbp, dtype, "full")


def _filled(
    shp: tuple[int, ...], value: Any, placement: Any, sbp: Any, dtype: Any, what: str
) -> GlobalArray:
    p = _check_placement(placement, what)
    dt = np.dtype(dtype or np.float32)
    nd = normalize(sbp, p.ndim, len(shp), what)
    me = my_rank()
    if not p.has(me):
        return GlobalArray(None, shp, dt, p, nd)
    xp = array_module(p)
    lshape = tuple(hi - lo for lo, hi in local_region(shp, p.hierarchy, nd, p.coords(me)))
    fill = 0 if _zero_partial(p, nd, me) else value
    return GlobalArray(xp.full(lshape, fill, dt), shp, dt, p, nd)


def ones(*shape: Any, placement: Placement, sbp: Any = broadcast, dtype: Any = None):
    return _filled(_shape_arg(shape, "ones"), 1, placement, sbp, dtype, "ones")


def zeros(*shape: Any, placement: Placement, sbp: Any = broadcast, dtype: Any = None):
    return _filled(_shape_arg(shape, "zeros"), 0, placement, sbp, dtype, "zeros")


def arange(
    start: Any, stop: Any = None, step: Any = 1, *, placement: Placement, sbp: Any = broadcast,
    dtype: Any = None,
) -> GlobalArray:  # fmt: skip
    """1-D range (default dtype int64 for ints, float32 otherwise, as OneFlow)."""
    if stop is None:
        start, stop = 0, start
    values = np.arange(start, stop, step)
    if dtype is None:
        dtype = np.int64 if values.dtype.kind in "iu" else np.float32
    return global_array(values.astype(dtype), placement, sbp)


def randn(
    *shape: Any, placement: Placement, sbp: Any = broadcast, dtype: Any = None,
    seed: int | None = None,
) -> GlobalArray:  # fmt: skip
    """Standard normal values, the same global value on every rank for one seed. Without a
    seed, the placement's first rank draws one and broadcasts it."""
    p = _check_placement(placement, "randn")
    shp = _shape_arg(shape, "randn")
    if seed is None:
        seed = _shared_seed(p)
    values = np.random.default_rng(seed).standard_normal(shp).astype(dtype or np.float32)
    return global_array(values, p, sbp)


def _shared_seed(p: Placement) -> int:
    me = my_rank()
    if not p.has(me):
        return 0  # metadata only: the value is never used
    xp = array_module(p)
    box = xp.asarray([np.random.SeedSequence().entropy % (1 << 62)], dtype=np.int64)
    if p.size > 1:
        ops.broadcast(box, src=p.ranks[0], group=group_of(p.ranks))
    return int(box[0])
