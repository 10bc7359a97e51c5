"""SBP: how a global array's value is laid out along one axis of its placement.

    split(dim)   each rank of the axis holds one balanced piece along `dim`  ("S(dim)")
    broadcast    each rank holds the whole value                              ("B")
    partial_sum  each rank holds an array of the global shape; the value is
                 their elementwise sum                                        ("P")

Names and meaning follow OneFlow's `oneflow.sbp`. A placement with m axes takes one
SBP per axis (a tuple); a 1-D placement also takes a single SBP.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from .errors import GlobalViewError

__all__ = ["Sbp", "Split", "broadcast", "fmt", "normalize", "parse", "partial_sum", "split"]


class Sbp:
    """Base of split(dim), broadcast and partial_sum."""

    short = "?"

    def __str__(self) -> str:
        return self.short


@dataclass(frozen=True)
class Split(Sbp):
    dim: int

    @property
    def short(self) -> str:  # type: ignore[override]
        return f"S({self.dim})"

    def __repr__(self) -> str:
        return f"sbp.split(dim={self.dim})"

    def __str__(self) -> str:
        return self.short


class _Broadcast(Sbp):
    short = "B"

    def __repr__(self) -> str:
        return "sbp.broadcast"

    def __reduce__(self) -> str:
        return "broadcast"


class _PartialSum(Sbp):
    short = "P"

    def __repr__(self) -> str:
        return "sbp.partial_sum"

    def __reduce__(self) -> str:
        return "partial_sum"


broadcast = _Broadcast()
partial_sum = _PartialSum()


def split(dim: int) -> Split:
    """S(dim): pieces along `dim` (negative counts from the end, resolved per array)."""
    if isinstance(dim, bool) or not isinstance(dim, int):
        raise GlobalViewError(f"sbp.split: dim must be an int, got {dim!r}")
    return Split(dim)


_SPLIT_TEXT = re.compile(r"^(?:s|split)\(?\s*(?:dim\s*=\s*)?(-?\d+)\s*\)?$")


def parse(value: Any) -> Sbp:
    """An Sbp from an Sbp or its short text: "S(0)", "S0", "split(1)", "B", "P",
    "broadcast", "partial_sum"."""
    if isinstance(value, Sbp):
        return value
    if isinstance(value, str):
        text = value.strip().lower()
        if text in ("b", "broadcast"):
            return broadcast
        if text in ("p", "partial_sum"):
            return partial_sum
        m = _SPLIT_TEXT.match(text)
        if m:
            return Split(int(m.group(1)))
    raise GlobalViewError(
        f"sbp: {value!r} is not an SBP; use sbp.split(dim), sbp.broadcast or sbp.partial_sum "
        f"(or the text 'S(0)', 'B', 'P')"
    )


def normalize(value: Any, mesh_ndim: int, array_ndim: int | None, what: str) -> tuple[Sbp, ...]:
    """One SBP per placement axis, split dims resolved against `array_ndim` and checked."""
    items: Sequence[Any]
    items = value if isinstance(value, (list, tuple)) else [value]
    nd = tuple(parse(v) for v in items)
    if len(nd) != mesh_ndim:
        raise GlobalViewError(
            f"{what}: sbp {fmt(nd)} has {len(nd)} entries, but the placement has {mesh_ndim} "
            f"axes; give one SBP per placement axis"
        )
    if array_ndim is None:
        return nd
    out = []
    for s in nd:
        if isinstance(s, Split):
            d = s.dim + array_ndim if s.dim < 0 else s.dim
            if not 0 <= d < array_ndim:
                raise GlobalViewError(
                    f"{what}: sbp {s} splits dim {s.dim}, but the array has {array_ndim} dims; "
                    f"use a dim in 0..{array_ndim - 1}"
                )
            s = Split(d)
        out.append(s)
    return tuple(out)


def fmt(nd: Sequence[Sbp]) -> str:
    """(S(0), B) -> "(S(0), B)"; a single SBP prints bare."""
    if len(nd) == 1:
        return str(nd[0])
    return "(" + ", ".join(str(s) for s in nd) + ")"
