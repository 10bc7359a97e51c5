"""All-reduce and reduce through the shared-memory arena of ranks on one host.

Two paths, the same bits (every element is combined in rank order on both):
- small arrays (up to SMALL_BYTES): one step. Each rank copies its array into its buffer,
  posts, and reduces every rank's buffer straight into its result. One wait per call,
  no allocation, and no system call while the ranks are busy (shm.py).
- larger arrays: per chunk of one buffer, each rank copies in, one step, reduces its own
  slice of every buffer straight into its result, publishes that slice, one step, copies
  the other slices out: a reduce-scatter and an all-gather, pipelined over two buffers
  that alternate, so a fast rank never overwrites data a slow one still reads.
"""

from __future__ import annotations

import os
from collections.abc import Callable

import numpy as np

from .checks import dtype_code
from .reduce_op import ReduceOp, reduce_into
from .shm import ShmArena
from .slicing import bounds, ranges
from .tcp import OPCODE, OPCODES

__all__ = ["SMALL_BYTES", "shm_reduce"]

SMALL_ENV = "PADDLIKE_SHM_SMALL_BYTES"
SMALL_BYTES = 16 << 10


def small_bytes() -> int:
    """Arrays up to this size take the one-step path (PADDLIKE_SHM_SMALL_BYTES; 0: never)."""
    raw = os.environ.get(SMALL_ENV, "").strip()
    try:
        return int(raw) if raw else SMALL_BYTES
    except ValueError:
        raise ValueError(f"environment variable {SMALL_ENV}={raw!r} is not bytes") from None


def shm_reduce(
    arena: ShmArena, next_buf: Callable[[], int], x: np.ndarray, op: ReduceOp,
    deadline: float, root: int | None, what: str, out: np.ndarray | None = None,
    small: int = SMALL_BYTES,
) -> None:  # fmt: skip
    """Reduce x over the arena's ranks into x (or `out`) on every rank, or on `root` only."""
    if x.nbytes <= min(small, arena.buffer_bytes):
        _one_step(arena, next_buf(), x, op, deadline, root, what, out)
    else:
        _chunked(arena, next_buf, x, op, deadline, root, what, out)


def _one_step(
    arena: ShmArena, buf: int, x: np.ndarray, op: ReduceOp, deadline: float,
    root: int | None, what: str, out: np.ndarray | None,
) -> None:  # fmt: skip
    src = x if x.ndim == 1 else x.reshape(-1)
    nbytes = x.nbytes
    opcode = OPCODE[what]
    kind = dtype_code(x.dtype)
    parity = arena.begin(opcode, nbytes, deadline, what, kind=kind)
    parts = arena.parts(buf, src.dtype, src.size)  # every rank's buffer, by rank
    parts[arena.rank][...] = src
    if root is None or arena.rank == root:
        arena.sync(deadline, what)
        arena.check(parity, opcode, nbytes, what, OPCODES, kind=kind)
        dst = src if out is None else out if out.ndim == 1 else out.reshape(-1)
        reduce_into(op, dst, parts, arena.size)
    else:
        # A rank that keeps nothing waits for the root alone: enough to see a mismatched
        # call there (both sides name it), without waiting for the other contributors.
        arena.sync(deadline, what, peers=[root])
        arena.check(parity, opcode, nbytes, what, OPCODES, ranks=[root], kind=kind)


def _chunked(
    arena: ShmArena, next_buf: Callable[[], int], x: np.ndarray, op: ReduceOp,
    deadline: float, root: int | None, what: str, out: np.ndarray | None,
) -> None:  # fmt: skip
    n, r = arena.size, arena.rank
    src = x.reshape(-1)
    xf = src if out is None else out.reshape(-1)  # where the result goes
    dt = xf.dtype
    per = arena.buffer_bytes // dt.itemsize
    chunks = ranges(xf.size, per)
    keeps = root is None or r == root
    # Ranks 0 and 1 may reduce into their own slice of x (it is parts[rank], and the ufunc
    # writes element by element), which saves copying that slice in; with a separate
    # `out` every rank reads its own slice straight from x and reduces into out.
    in_place = keeps and (r <= 1 or out is not None)
    scratch = None if keeps else np.empty(bounds(per, n, 0)[1], dt)
    opcode = OPCODE[what]
    kind = dtype_code(x.dtype)
    parity = 0
    for i, (a, b) in enumerate(chunks):
        buf = next_buf()
        if i == 0:
            parity = arena.begin(opcode, x.nbytes, deadline, what, kind=kind)
        else:
            arena.begin_use(deadline, what)
        m = b - a
        mine = arena.data(r, buf, dt)
        lo, hi = bounds(m, n, r)
        if in_place:
            mine[:lo] = src[a : a + lo]
            mine[hi:m] = src[a + hi : b]
        else:
            mine[:m] = src[a:b]
        arena.sync(deadline, what)
        if i == 0:
            arena.check(parity, opcode, x.nbytes, what, OPCODES, kind=kind)
        target = xf[a + lo : a + hi] if keeps else scratch[: hi - lo]  # type: ignore[index]
        own = target if out is None else src[a + lo : a + hi]
        parts = [own if (in_place and k == r) else arena.data(k, buf, dt)[lo:hi] for k in range(n)]
        reduce_into(op, target, parts, n)
        mine[lo:hi] = target
        arena.sync(deadline, what)
        if keeps:
            for k in range(n):
                if k != r:
                    klo, khi = bounds(m, n, k)
                    xf[a + klo : a + khi] = arena.data(k, buf, dt)[klo:khi]
