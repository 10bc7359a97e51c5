"""All-reduce and reduce over TCP between ranks that share no memory (the mesh of tcp.py).

Small arrays go to every peer at once (latency-optimal for the small worlds of CPU jobs);
large ones take a ring, which moves 2(n-1)/n of the array per rank.
"""

from __future__ import annotations

import numpy as np

from .reduce_op import ReduceOp, reduce_into, ufunc_of
from .slicing import bounds, byte_view
from .tcp import Mesh, Recv, Send

__all__ = ["allreduce_direct", "allreduce_ring", "reduce_to_root"]


def allreduce_direct(mesh: Mesh, x: np.ndarray, op: ReduceOp, deadline: float) -> None:
    """Every rank sends its whole array to every peer and reduces locally: one round trip."""
    xf = x.reshape(-1)
    peers = [k for k in range(mesh.size) if k != mesh.rank]
    tmps = {k: np.empty_like(xf) for k in peers}
    mesh.exchange(
        [Send(k, byte_view(xf), "all_reduce") for k in peers],
        [Recv(k, byte_view(tmps[k]), "all_reduce") for k in peers],
        deadline,
        "all_reduce",
    )
    parts = [xf if k == mesh.rank else tmps[k] for k in range(mesh.size)]
    out = xf if mesh.rank == 0 else np.empty_like(xf)
    reduce_into(op, out, parts, mesh.size)
    if out is not xf:
        xf[...] = out


def allreduce_ring(mesh: Mesh, x: np.ndarray, op: ReduceOp, deadline: float) -> None:
    """Ring reduce-scatter then ring all-gather; each received chunk is reduced while the
    rest arrives."""
    n, r = mesh.size, mesh.rank
    xf = x.reshape(-1)
    itemsize = xf.dtype.itemsize
    segs = [bounds(xf.size, n, k) for k in range(n)]
    right, left = (r + 1) % n, (r - 1) % n
    tmp = np.empty(max(hi - lo for lo, hi in segs), xf.dtype)
    ufunc = ufunc_of(op)
    for s in range(n - 1):
        slo, shi = segs[(r - s) % n]
        rlo, rhi = segs[(r - s - 1) % n]
        dst, t = xf[rlo:rhi], tmp[: rhi - rlo]

        def combine(off: int, nbytes: int, dst: np.ndarray = dst, t: np.ndarray = t) -> None:
            e0, e1 = off // itemsize, (off + nbytes) // itemsize
            ufunc(dst[e0:e1], t[e0:e1], out=dst[e0:e1])

        mesh.exchange(
            [Send(right, byte_view(xf[slo:shi]), "all_reduce")],
            [Recv(left, byte_view(t), "all_reduce", chunk=combine, chunk_bytes=1 << 20)],
            deadline,
            "all_reduce",
        )
    if op is ReduceOp.AVG:
        lo, hi = segs[(r + 1) % n]
        np.divide(xf[lo:hi], n, out=xf[lo:hi], casting="unsafe")
    for s in range(n - 1):
        slo, shi = segs[(r + 1 - s) % n]
        rlo, rhi = segs[(r - s) % n]
        mesh.exchange(
            [Send(right, byte_view(xf[slo:shi]), "all_reduce")],
            [Recv(left, byte_view(xf[rlo:rhi]), "all_reduce")],
            deadline,
            "all_reduce",
        )


def reduce_to_root(mesh: Mesh, x: np.ndarray, op: ReduceOp, deadline: float, root: int) -> None:
    """Every rank sends to the root, which reduces in rank order."""
    if mesh.rank != root:
        mesh.exchange([Send(root, byte_view(x), "reduce")], [], deadline, "reduce")
        return
    peers = [k for k in range(mesh.size) if k != root]
    tmps = {k: np.empty_like(x) for k in peers}
    mesh.exchange([], [Recv(k, byte_view(tmps[k]), "reduce") for k in peers], deadline, "reduce")
    parts = [x if k == root else tmps[k] for k in range(mesh.size)]
    out = x if root == 0 else np.empty_like(x)
    reduce_into(op, out, parts, mesh.size)
    if out is not x:
        x[...] = out
