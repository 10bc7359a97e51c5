"""Argument checks done before any byte moves: each message names the operation, the argument
and why it was refused, so the user fixes the call instead of debugging a hang or garbage.

Works for numpy and cupy arrays alike (only .dtype, .shape, .flags are read).
"""

from __future__ import annotations

import numbers
from collections.abc import Sequence
from typing import Any

import numpy as np

__all__ = [
    "DEVICE_ONLY_DTYPES",
    "SUPPORTED_DTYPES",
    "as_rank",
    "check_array",
    "check_list",
    "check_rank",
]

SUPPORTED_DTYPES = frozenset(
    np.dtype(t)
    for t in ("bool", "int8", "uint8", "int16", "int32", "int64", "float16", "float32", "float64")
)

# NCCL reduces these too; the CPU backend's wire and reductions do not carry them.
DEVICE_ONLY_DTYPES = frozenset(np.dtype(t) for t in ("uint32", "uint64"))

# A small code per dtype that the ranks compare (a reduction of float32 on one rank and
# int32 of the same size on another would combine reinterpreted bytes): by the dtype's
# kind, size and byte order, so int64 is int64 whichever C type made it. 0: none given.
DTYPE_NAMES = {i + 1: d.str for i, d in enumerate(sorted(SUPPORTED_DTYPES, key=str))}
_DTYPE_CODES: dict[Any, int] = {np.dtype(name): code for code, name in DTYPE_NAMES.items()}


def dtype_code(dtype: np.dtype) -> int:
    """The code the ranks compare for `dtype` (0 for one the CPU backend does not carry)."""
    code = _DTYPE_CODES.get(dtype)
    if code is None:  # an equal dtype by another C type (longlong for int64): by its str
        code = _DTYPE_CODES[dtype] = next(
            (c for c, name in DTYPE_NAMES.items() if name == dtype.str), 0
        )
    return code


def dtype_name(code: int) -> str:
    return str(np.dtype(DTYPE_NAMES[code])) if code in DTYPE_NAMES else "?"


# (dtype -> the array types that passed the type and dtype checks with it): those checks
# run once per kind of array, not per call; layout (contiguous, writeable) is per array.
_ACCEPTED: dict[Any, tuple[type, ...]] = {}


def check_array(x: Any, op: str, arg: str) -> None:
    """A C-contiguous array of a supported dtype; refused with the reason otherwise."""
    dtype = getattr(x, "dtype", None)
    try:
        known = type(x) in _ACCEPTED.get(dtype, ())
    except TypeError:  # an unhashable `dtype` attribute: not an array
        known = False
    if not known:
        _check_kind(x, op, arg)
        _ACCEPTED[dtype] = (*_ACCEPTED.get(dtype, ()), type(x))
    flags = x.flags
    if not flags.c_contiguous:
        raise ValueError(
            f"{op}: argument {arg!r} is not C-contiguous (shape {tuple(x.shape)}, strides "
            f"{tuple(x.strides)}); collectives write in place, so pass a contiguous array, "
            f"e.g. np.ascontiguousarray(x), and use that array afterwards"
        )
    if not getattr(flags, "writeable", True):  # cupy arrays are always writeable
        raise ValueError(f"{op}: argument {arg!r} is read-only; pass a writeable array")


def _check_kind(x: Any, op: str, arg: str) -> None:
    """An array (dtype, flags, shape) of a dtype its backend carries."""
    if not hasattr(x, "dtype") or not hasattr(x, "flags") or not hasattr(x, "shape"):
        raise TypeError(
            f"{op}: argument {arg!r} must be an array (numpy on the CPU backend, cupy on NCCL), "
            f"got {type(x).__name__}"
        )
    dtype = np.dtype(x.dtype)
    if dtype not in SUPPORTED_DTYPES and not (
        dtype in DEVICE_ONLY_DTYPES and type(x).__module__.startswith("cupy")
    ):
        names = ", ".join(sorted(str(d) for d in SUPPORTED_DTYPES))
        raise TypeError(f"{op}: argument {arg!r} has dtype {x.dtype}, which is not one of {names}")


def check_same(x: Any, like: Any, op: str, arg: str) -> None:
    """`x` must have the shape and dtype of `like` (the operation's main array)."""
    check_array(x, op, arg)
    if tuple(x.shape) != tuple(like.shape) or x.dtype != like.dtype:
        raise ValueError(
            f"{op}: argument {arg!r} has shape {tuple(x.shape)} and dtype {x.dtype}, "
            f"expected shape {tuple(like.shape)} and dtype {like.dtype}"
        )


def check_list(
    items: Any, n: int, op: str, arg: str, *, dtype: Any = None, same_shape: Any = None
) -> list[Any]:
    """A list of `n` arrays (one per group rank); all one dtype, optionally one shape."""
    if not isinstance(items, (list, tuple)):
        raise TypeError(
            f"{op}: argument {arg!r} must be a list of arrays, got {type(items).__name__}"
        )
    if len(items) != n:
        raise ValueError(
            f"{op}: argument {arg!r} has {len(items)} arrays, expected one per rank of the "
            f"group ({n})"
        )
    for i, item in enumerate(items):
        check_array(item, op, f"{arg}[{i}]")
        if dtype is not None and np.dtype(item.dtype) != np.dtype(dtype):
            raise ValueError(f"{op}: {arg}[{i}] has dtype {item.dtype}, expected {np.dtype(dtype)}")
        if same_shape is not None and tuple(item.shape) != tuple(same_shape):
            raise ValueError(
                f"{op}: {arg}[{i}] has shape {tuple(item.shape)}, expected {tuple(same_shape)}"
            )
    return list(items)


def as_rank(rank: Any, op: str, arg: str) -> int:
    """A rank given as any integer (int, numpy integer; not bool) -> int; refused otherwise."""
    if isinstance(rank, (bool, np.bool_)) or not isinstance(rank, numbers.Integral):
        raise TypeError(f"{op}: {arg} must be a global rank (int), got {rank!r}")
    return int(rank)


def check_rank(rank: Any, ranks: Sequence[int], op: str, arg: str) -> int:
    """A global rank that is a member of the group; returns it as an int."""
    value = as_rank(rank, op, arg)
    if value not in ranks:
        raise ValueError(
            f"{op}: {arg}={value} is not a rank of this group (its ranks are {list(ranks)})"
        )
    return value
