"""GlobalArray: one logical array over a placement, each rank holding its piece.

Every rank of the placement runs the same program on the global arrays; each operation
picks an SBP signature (signatures.py), boxes its inputs to it (boxing.py) and computes
on the local pieces. A rank outside the placement holds the array's metadata only:
computing on it is refused, moving it to a placement that has the rank is not.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Sequence
from typing import Any

from . import signatures as sig
from .boxing import convert, move
from .errors import GlobalViewError
from .groups import array_module, my_rank, require_backend
from .placement import Placement
from .regions import local_shape
from .sbp import Sbp, Split, broadcast, fmt, normalize

__all__ = ["GlobalArray"]


class GlobalArray:
    """A global array: `shape`, `dtype`, `placement`, `sbp` (one SBP per placement axis)
    and, on the placement's ranks, the local piece (`to_local()`)."""

    __array_priority__ = 1000  # numpy scalars defer to our reflected operators
    __slots__ = ("_local", "dtype", "placement", "sbp", "shape")

    def __init__(
        self, local: Any, shape: tuple[int, ...], dtype: Any, p: Placement, nd_sbp: tuple[Sbp, ...]
    ) -> None:
        self._local = local
        self.shape = tuple(int(n) for n in shape)
        self.dtype = dtype
        self.placement = p
        self.sbp = tuple(nd_sbp)

    # --- what it is ---------------------------------------------------------------------

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def size(self) -> int:
        return math.prod(self.shape)

    @property
    def nbytes(self) -> int:
        return self.size * self.dtype.itemsize

    is_global = True

    def __repr__(self) -> str:
        return (
            f"GlobalArray(shape={self.shape}, dtype={self.dtype}, placement={self.placement}, "
            f"sbp={fmt(self.sbp)})"
        )

    def __len__(self) -> int:
        if not self.shape:
            raise TypeError("len() of a 0-d GlobalArray")
        return self.shape[0]

    def _mine(self, what: str) -> Any:
        """The local piece; refused on a rank outside the placement."""
        if self._local is None:
            p = self.placement
            raise GlobalViewError(
                f"{what}: rank {my_rank()} is not in the placement {p} (ranks "
                f"{list(p.ranks)}) of this {fmt(self.sbp)} array of shape {self.shape}; only "
                f"those ranks hold it — move it with to_global(placement=...) first, or run "
                f"this only on those ranks"
            )
        require_backend(self.placement, what)
        return self._local

    def _xp(self) -> Any:
        return array_module(self.placement)

    def _check_local(self, what: str) -> None:
        """Internal consistency: the piece has the shape the layout says."""
        want = local_shape(
            self.shape, self.placement.hierarchy, self.sbp, self.placement.coords(my_rank())
        )
        if tuple(self._local.shape) != want:
            raise AssertionError(
                f"{what}: local piece {tuple(self._local.shape)} != layout {want} for {self!r}"
            )

    # --- local and global values ----------------------------------------------------------

    def to_local(self) -> Any:
        """This rank's piece (numpy or cupy), shared with the array, not copied."""
        return self._mine("to_local")

    def numpy(self) -> Any:
        """The global value, as a numpy array, on every rank of the placement (boxes to B)."""
        self._mine("numpy")
        full = self.to_global(sbp=(broadcast,) * self.placement.ndim)._local
        if self.placement.type == "cuda":
            return full.get()
        import numpy as np

        return np.array(full, copy=True)

    def to_global(self, placement: Placement | None = None, sbp: Any = None) -> GlobalArray:
        """The same value with another SBP (boxing) and/or on another placement.

        Every rank of both placements calls it; a rank in neither gets the metadata."""
        q = self.placement if placement is None else placement
        if not isinstance(q, Placement):
            raise GlobalViewError(f"to_global: placement must be a placement(...), got {q!r}")
        if sbp is None:
            if q.ndim != self.placement.ndim:
                raise GlobalViewError(
                    f"to_global: moving from {self.placement} to {q} changes the number of "
                    f"placement axes; pass sbp= with {q.ndim} entries"
                )
            sbp = self.sbp
        nd = normalize(sbp, q.ndim, self.ndim, "to_global")
        me = my_rank()
        p = self.placement
        if q == p:
            if nd == self.sbp:
                return self
            local = self._mine("to_global")
            out = convert(self._xp(), local, self.shape, p, self.sbp, nd, me)
            return GlobalArray(out, self.shape, self.dtype, q, nd)
        if q.type != p.type:
            return self._change_device(q, nd)
        if not (p.has(me) or q.has(me)):
            return GlobalArray(None, self.shape, self.dtype, q, nd)
        require_backend(p, "to_global")
        require_backend(q, "to_global")
        local = self._local if p.has(me) else None
        out = move(self._xp(), local, self.shape, self.dtype, p, self.sbp, q, nd, me)
        return GlobalArray(out, self.shape, self.dtype, q, nd)

    def _change_device(self, q: Placement, nd: tuple[Sbp, ...]) -> GlobalArray:
        p = self.placement
        if (q.ranks, q.hierarchy) != (p.ranks, p.hierarchy):
            raise GlobalViewError(
                f"to_global: moving from {p} to {q} changes both the device type and the "
                f"ranks; change one at a time"
            )
        local = self._local
        if local is not None:
            local = local.get() if p.type == "cuda" else array_module(q).asarray(local)
        return GlobalArray(local, self.shape, self.dtype, q, self.sbp).to_global(sbp=nd)

    # --- operators --------------------------------------------------------------------------

    def _operand(self, other: Any, what: str) -> GlobalArray | Any:
        if isinstance(other, GlobalArray):
            if other.placement != self.placement:
                raise GlobalViewError(
                    f"{what}: the operands have different placements, {self.placement} (sbp "
                    f"{fmt(self.sbp)}) and {other.placement} (sbp {fmt(other.sbp)}); move one "
                    f"with to_global(placement=...) first"
                )
            return other
        if isinstance(other, (numbers.Number, bool)) or (
            hasattr(other, "shape")
            and getattr(other, "shape", None) == ()
            and not hasattr(other, "placement")
        ):
            return other
        raise GlobalViewError(
            f"{what}: cannot combine a GlobalArray with {type(other).__name__}; make it global "
            f"first with dist.global_array(value, placement={self.placement}, sbp=...)"
        )

    def _binary(self, op: str, other: Any, reflected: bool = False) -> GlobalArray:
        other = self._operand(other, op)
        operands = [other, self] if reflected else [self, other]
        arrays = [a for a in operands if isinstance(a, GlobalArray)]
        for a in arrays:
            a._mine(op)
        shapes = [a.shape if isinstance(a, GlobalArray) else () for a in operands]
        try:
            import numpy as np

            out_shape = tuple(np.broadcast_shapes(*shapes))
        except ValueError:
            raise GlobalViewError(
                f"{op}: shapes {shapes[0]} and {shapes[1]} do not broadcast"
            ) from None
        priced = [
            (a.shape, a.sbp, a.nbytes) if isinstance(a, GlobalArray) else None for a in operands
        ]
        s = sig.elementwise(op, priced, out_shape, self.placement.hierarchy)
        locals_ = [
            a._boxed(need) if isinstance(a, GlobalArray) else a
            for a, need in zip(operands, s.inputs, strict=True)
        ]
        xp = self._xp()
        fn = {"add": xp.add, "sub": xp.subtract, "mul": xp.multiply, "div": xp.true_divide}[op]
        return self._result(fn(*locals_), out_shape, s.output, op)

    def _boxed(self, nd: tuple[Sbp, ...]) -> Any:
        return self.to_global(sbp=nd)._local

    def _result(self, local: Any, shape: tuple[int, ...], nd: tuple[Sbp, ...], what: str):
        xp = self._xp()
        local = xp.asarray(local)
        out = GlobalArray(local, shape, local.dtype, self.placement, nd)
        out._check_local(what)
        return out

    def __add__(self, other: Any) -> GlobalArray:
        return self._binary("add", other)

    def __radd__(self, other: Any) -> GlobalArray:
        return self._binary("add", other, reflected=True)

    def __sub__(self, other: Any) -> GlobalArray:
        return self._binary("sub", other)

    def __rsub__(self, other: Any) -> GlobalArray:
        return self._binary("sub", other, reflected=True)

    def __mul__(self, other: Any) -> GlobalArray:
        return self._binary("mul", other)

    def __rmul__(self, other: Any) -> GlobalArray:
        return self._binary("mul", other, reflected=True)

    def __truediv__(self, other: Any) -> GlobalArray:
        return self._binary("div", other)

    def __rtruediv__(self, other: Any) -> GlobalArray:
        return self._binary("div", other, reflected=True)

    def __neg__(self) -> GlobalArray:
        local = self._mine("neg")
        return self._result(-local, self.shape, self.sbp, "neg")  # linear: every SBP stays

    def __matmul__(self, other: Any) -> GlobalArray:
        return self.matmul(other)

    def matmul(self, w: Any) -> GlobalArray:
        """2-D x @ w; the signature table is in signatures.MATMUL."""
        if not isinstance(w, GlobalArray):
            raise GlobalViewError(
                f"matmul: w must be a GlobalArray, got {type(w).__name__}; make it global with "
                f"dist.global_array(w, placement={self.placement}, sbp=dist.sbp.broadcast)"
            )
        self._operand(w, "matmul")
        if self.ndim != 2 or w.ndim != 2:
            raise GlobalViewError(
                f"matmul: takes 2-D arrays, got shapes {self.shape} and {w.shape}"
            )
        if self.shape[1] != w.shape[0]:
            raise GlobalViewError(
                f"matmul: shapes {self.shape} and {w.shape} do not align: dim 1 of x "
                f"({self.shape[1]}) != dim 0 of w ({w.shape[0]})"
            )
        self._mine("matmul")
        w._mine("matmul")
        s = sig.matmul((self.sbp, self.nbytes), (w.sbp, w.nbytes), self.placement.hierarchy)
        a, b = self._boxed(s.inputs[0]), w._boxed(s.inputs[1])  # type: ignore[arg-type]
        return self._result(a @ b, (self.shape[0], w.shape[1]), s.output, "matmul")

    # --- reductions and shape -------------------------------------------------------------

    def _axes(self, axis: int | Sequence[int] | None, what: str) -> tuple[int, ...]:
        if axis is None:
            return tuple(range(self.ndim))
        items = [axis] if isinstance(axis, int) else list(axis)
        out = []
        for a in items:
            if not -self.ndim <= a < self.ndim:
                raise GlobalViewError(
                    f"{what}: axis {a} is out of range for an array of {self.ndim} dims "
                    f"(shape {self.shape})"
                )
            out.append(a % self.ndim)
        return tuple(sorted(set(out)))

    def sum(self, axis: int | Sequence[int] | None = None, keepdims: bool = False) -> GlobalArray:
        """Sum over `axis`; a split axis summed away makes the result P."""
        axes = self._axes(axis, "sum")
        local = self._mine("sum")
        xp = self._xp()
        out = xp.sum(local, axis=axes, keepdims=keepdims)
        shape = tuple(
            (1 if d in axes else n) for d, n in enumerate(self.shape) if keepdims or d not in axes
        )
        nd = sig.reduce_sbp(self.sbp, self.ndim, axes, keepdims)
        return self._result(out, shape, nd, "sum")

    def mean(self, axis: int | Sequence[int] | None = None, keepdims: bool = False) -> GlobalArray:
        """The sum divided by the global count (P stays P: division by a constant)."""
        axes = self._axes(axis, "mean")
        total = self.sum(axes, keepdims)
        count = math.prod(self.shape[a] for a in axes)
        return total._result(total._local / count, total.shape, total.sbp, "mean")

    def transpose(self, *axes: int) -> GlobalArray:
        perm = list(axes[0]) if len(axes) == 1 and not isinstance(axes[0], int) else list(axes)
        if not perm:
            perm = list(reversed(range(self.ndim)))
        if sorted(a % max(self.ndim, 1) for a in perm) != list(range(self.ndim)):
            raise GlobalViewError(
                f"transpose: axes {perm} are not a permutation of 0..{self.ndim - 1}"
            )
        perm = [a % self.ndim for a in perm]
        local = self._mine("transpose")
        nd = sig.transpose_sbp(self.sbp, perm)
        shape = tuple(self.shape[a] for a in perm)
        return self._result(local.transpose(perm), shape, nd, "transpose")

    @property
    def T(self) -> GlobalArray:
        return self.transpose()

    def reshape(self, *shape: Any) -> GlobalArray:
        """Pieces reshape locally when every split dim survives whole; otherwise the split
        axes are gathered to B first."""
        new = list(shape[0]) if len(shape) == 1 and not isinstance(shape[0], int) else list(shape)
        if new.count(-1) > 1:
            raise GlobalViewError(f"reshape: shape {tuple(new)} has more than one -1")
        if -1 in new:
            known = math.prod(n for n in new if n != -1)
            new[new.index(-1)] = self.size // known if known else 0
        if math.prod(new) != self.size:
            raise GlobalViewError(
                f"reshape: cannot reshape an array of shape {self.shape} ({self.size} "
                f"elements) into {tuple(new)}"
            )
        self._mine("reshape")
        src = self
        nd = sig.reshape_sbp(self.shape, new, self.sbp)
        if nd is None:
            gathered = tuple(broadcast if isinstance(s, Split) else s for s in self.sbp)
            src = self.to_global(sbp=gathered)
            nd = gathered
        want = local_shape(new, self.placement.hierarchy, nd, self.placement.coords(my_rank()))
        return self._result(src._local.reshape(want), tuple(new), nd, "reshape")
