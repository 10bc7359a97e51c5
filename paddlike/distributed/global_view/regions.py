"""Where each piece of a global array lives: pure arithmetic, no communication.

Uneven split (OneFlow's rule): n elements over k parts give each part n // k, and the
first n % k parts one more (5 over 4: 2, 1, 1, 1). An n-D SBP applies its axes in
order: axis 0 splits the global array, axis 1 splits each of those pieces, and so on;
two axes splitting the same dim nest.

A region is a tuple of (lo, hi) per array dim, in global indices.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from .errors import GlobalViewError
from .sbp import Sbp, Split, fmt

__all__ = [
    "Region",
    "even_global_shape",
    "infer_global_shape",
    "intersect",
    "local_region",
    "local_shape",
    "region_shape",
    "split_bounds",
    "split_sizes",
]

Region = tuple[tuple[int, int], ...]


def split_sizes(n: int, k: int) -> list[int]:
    """Sizes of the k balanced parts of n: n // k each, the first n % k one more."""
    base, extra = divmod(n, k)
    return [base + (1 if i < extra else 0) for i in range(k)]


def split_bounds(n: int, k: int, i: int) -> tuple[int, int]:
    """[lo, hi) of part i of the k balanced parts of range(n)."""
    base, extra = divmod(n, k)
    lo = i * base + min(i, extra)
    return lo, lo + base + (1 if i < extra else 0)


def local_region(
    shape: Sequence[int], hierarchy: Sequence[int], nd_sbp: Sequence[Sbp],
    coords: Sequence[int], upto: int | None = None,
) -> Region:  # fmt: skip
    """The global region held at mesh coordinates `coords`, applying the first `upto`
    axes (all by default). B and P hold the whole region of their level."""
    region = [(0, int(n)) for n in shape]
    axes = len(nd_sbp) if upto is None else upto
    for axis in range(axes):
        s = nd_sbp[axis]
        if isinstance(s, Split):
            lo, hi = region[s.dim]
            a, b = split_bounds(hi - lo, hierarchy[axis], coords[axis])
            region[s.dim] = (lo + a, lo + b)
    return tuple(region)


def region_shape(region: Region) -> tuple[int, ...]:
    return tuple(hi - lo for lo, hi in region)


def local_shape(
    shape: Sequence[int], hierarchy: Sequence[int], nd_sbp: Sequence[Sbp], coords: Sequence[int]
) -> tuple[int, ...]:
    return region_shape(local_region(shape, hierarchy, nd_sbp, coords))


def intersect(a: Region, b: Region) -> Region | None:
    """The common region, or None when it is empty."""
    out = tuple((max(x0, y0), min(x1, y1)) for (x0, x1), (y0, y1) in zip(a, b, strict=True))
    if any(hi <= lo for lo, hi in out):
        return None
    return out


def even_global_shape(
    local: tuple[int, ...], hierarchy: Sequence[int], nd_sbp: Sequence[Sbp]
) -> tuple[int, ...]:
    """The global shape if every split piece were equal: each split dim times the ranks
    of the axes splitting it (what a rank can know without asking the others)."""
    out = list(local)
    for axis, s in enumerate(nd_sbp):
        if isinstance(s, Split):
            if not 0 <= s.dim < len(out):
                raise GlobalViewError(
                    f"to_global: sbp {fmt(nd_sbp)} splits dim {s.dim}, but the local array "
                    f"has {len(out)} dims"
                )
            out[s.dim] *= hierarchy[axis]
    return tuple(out)


def infer_global_shape(
    local_shapes: Sequence[tuple[int, ...]],
    hierarchy: Sequence[int],
    nd_sbp: Sequence[Sbp],
    coords_of: Callable[[int], tuple[int, ...]],
    rank_of: Callable[[int], int],
    what: str,
) -> tuple[int, ...]:
    """The global shape whose balanced pieces are `local_shapes` (one per parallel id).

    Along a split dim, the global size is the sum of the pieces of the ranks at coordinate
    0 on every other axis; every rank's piece must then be exactly its balanced piece
    (refused otherwise, naming the rank, its shape and the expected one)."""
    ndims = {len(s) for s in local_shapes}
    if len(ndims) != 1:
        shown = {rank_of(p): s for p, s in enumerate(local_shapes)}
        raise GlobalViewError(
            f"{what}: the ranks' local arrays have different numbers of dims: {shown}"
        )
    ndim = ndims.pop()
    for s in nd_sbp:
        if isinstance(s, Split) and not 0 <= s.dim < ndim:
            raise GlobalViewError(
                f"{what}: sbp {fmt(nd_sbp)} splits dim {s.dim}, but the local arrays have "
                f"{ndim} dims"
            )
    global_shape = list(local_shapes[0])
    for d in range(ndim):
        axes = [i for i, s in enumerate(nd_sbp) if isinstance(s, Split) and s.dim == d]
        if not axes:
            continue
        total = 0
        for pid, shp in enumerate(local_shapes):
            c = coords_of(pid)
            if all(c[i] == 0 for i in range(len(hierarchy)) if i not in axes):
                total += shp[d]
        global_shape[d] = total
    for pid, shp in enumerate(local_shapes):
        want = local_shape(global_shape, hierarchy, nd_sbp, coords_of(pid))
        if tuple(shp) != want:
            given = {rank_of(q): tuple(s) for q, s in enumerate(local_shapes)}
            raise GlobalViewError(
                f"{what}: rank {rank_of(pid)} passed a local array of shape {tuple(shp)}, but "
                f"sbp {fmt(nd_sbp)} over the placement's {tuple(hierarchy)} mesh needs {want} "
                f"there (global shape {tuple(global_shape)}; split pieces are n // k, the "
                f"first n % k one larger; B and P pieces have the global shape). Shapes by "
                f"rank: {given}"
            )
    return tuple(global_shape)
