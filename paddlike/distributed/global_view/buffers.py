"""Output buffers for boxing, recycled: a caching allocator for host arrays.

A boxing returns a new array and leaves its input alone, so it needs fresh memory for
every call; for large arrays the kernel maps and zeroes that memory on first touch,
which costs as much as moving the bytes (a 64 MiB all_gather into fresh memory takes
about 1.5x as long as into a warm buffer). So the arrays boxing allocates stay in a
pool after use, and a later boxing of the same shape and dtype takes one that nobody
references any more: CPython's reference count says when no array, view or buffer of
it is left (views keep their base alive). Only numpy arrays are pooled; CuPy has its
own memory pool. The pool holds at most PADDLIKE_GLOBAL_VIEW_POOL_BYTES (default
512 MiB, 0 turns it off).
"""

from __future__ import annotations

import os
import sys
import threading
from typing import Any

__all__ = ["empty", "pooled_bytes", "zeros"]

POOL_ENV = "PADDLIKE_GLOBAL_VIEW_POOL_BYTES"
DEFAULT_POOL_BYTES = 512 << 20
MIN_POOLED_BYTES = 1 << 20  # small arrays come from malloc's own free lists already

_lock = threading.Lock()
_pool: dict[tuple[tuple[int, ...], str], list[Any]] = {}
_FREE_REFCOUNT = 3  # the pool's list, the loop variable, getrefcount's own argument


def _limit() -> int:
    raw = os.environ.get(POOL_ENV, "").strip()
    try:
        return int(raw) if raw else DEFAULT_POOL_BYTES
    except ValueError:
        raise ValueError(f"environment variable {POOL_ENV}={raw!r} is not bytes") from None


def pooled_bytes() -> int:
    with _lock:
        return sum(a.nbytes for arrays in _pool.values() for a in arrays)


def empty(xp: Any, shape: tuple[int, ...], dtype: Any) -> Any:
    """An uninitialized C-contiguous array; from the pool when one is free."""
    import numpy as np

    shape = tuple(int(n) for n in shape)
    dt = np.dtype(dtype)
    if xp is not np or int(np.prod(shape, dtype=np.int64)) * dt.itemsize < MIN_POOLED_BYTES:
        return xp.empty(shape, dt)
    key = (shape, dt.str)
    with _lock:
        arrays = _pool.setdefault(key, [])
        for a in arrays:
            if sys.getrefcount(a) <= _FREE_REFCOUNT:
                return a
        fresh = np.empty(shape, dt)
        if _held() + fresh.nbytes <= _limit():
            arrays.append(fresh)
        return fresh


def _held() -> int:
    return sum(a.nbytes for arrays in _pool.values() for a in arrays)


def zeros(xp: Any, shape: tuple[int, ...], dtype: Any) -> Any:
    out = empty(xp, shape, dtype)
    out.fill(0)
    return out
