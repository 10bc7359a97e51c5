"""ReduceOp and the numpy reductions behind it, applied in one fixed order (deterministic)."""

from __future__ import annotations

import enum
from collections.abc import Sequence

import numpy as np

__all__ = ["ReduceOp", "check_op_dtype", "reduce_into"]


class ReduceOp(enum.IntEnum):
    """The reductions of `paddle.distributed.ReduceOp` / `torch.distributed.ReduceOp`."""

    SUM = 0
    MAX = 1
    MIN = 2
    PROD = 3
    AVG = 4


_AVG = ReduceOp.AVG  # a module constant: reading it off the class costs more per call
_UFUNC = {
    ReduceOp.SUM: np.add,
    ReduceOp.AVG: np.add,
    ReduceOp.MAX: np.maximum,
    ReduceOp.MIN: np.minimum,
    ReduceOp.PROD: np.multiply,
}
# numpy's add/multiply on bool are logical or/and, which is what SUM/PROD of flags mean.


def as_reduce_op(op: object) -> ReduceOp:
    """Accept ReduceOp, its int value or its name ("sum", "AVG")."""
    if isinstance(op, ReduceOp):
        return op
    if isinstance(op, str) and op.upper() in ReduceOp.__members__:
        return ReduceOp[op.upper()]
    if isinstance(op, int) and not isinstance(op, bool):
        try:
            return ReduceOp(op)
        except ValueError:
            pass
    names = ", ".join(ReduceOp.__members__)
    raise ValueError(f"op={op!r} is not a reduction; expected one of ReduceOp.{{{names}}}")


def check_op_dtype(op: ReduceOp, dtype: np.dtype, what: str) -> None:
    """AVG needs a floating dtype: averaging ints or flags has no exact answer."""
    if op is _AVG and dtype.kind not in "fc":
        raise TypeError(
            f"{what}: ReduceOp.AVG needs a floating-point array, got dtype {dtype}; "
            f"use ReduceOp.SUM and divide, or cast to float32 first"
        )


def reduce_into(op: ReduceOp, out: np.ndarray, parts: Sequence[np.ndarray], world: int) -> None:
    """out = parts[0] (op) parts[1] (op) ... in that order; AVG divides by `world` at the end.

    `out` may be one of `parts` only if it is parts[0]. Every rank that reduces the same
    parts gets the same bits, whatever rank runs it.
    """
    ufunc = _UFUNC[op]
    if len(parts) == 1:
        if out is not parts[0]:
            np.copyto(out, parts[0])
    else:
        ufunc(parts[0], parts[1], out)  # out positionally: the keyword costs a parse per call
        for k in range(2, len(parts)):
            ufunc(out, parts[k], out)
    if op is _AVG:
        np.divide(out, world, out=out, casting="unsafe")


def ufunc_of(op: ReduceOp) -> np.ufunc:
    """The binary numpy function that combines two partial results of `op` (AVG: add)."""
    return _UFUNC[op]
