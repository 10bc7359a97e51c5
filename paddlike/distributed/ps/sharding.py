"""Which server owns what: element ranges for dense tables, a key hash for sparse ones.

Pure functions shared by servers and workers, so both sides always agree.
"""

from __future__ import annotations

import numpy as np

_M1 = np.uint64(0xBF58476D1CE4E5B9)
_M2 = np.uint64(0x94D049BB133111EB)
_GOLDEN = np.uint64(0x9E3779B97F4A7C15)


def mix64(x: np.ndarray) -> np.ndarray:
    """The splitmix64 finaliser, vectorised: a fast, well-spread uint64 -> uint64 hash."""
    x = np.asarray(x).astype(np.uint64, copy=True)
    with np.errstate(over="ignore"):
        x ^= x >> np.uint64(30)
        x *= _M1
        x ^= x >> np.uint64(27)
        x *= _M2
        x ^= x >> np.uint64(31)
    return x


def dense_ranges(size: int, num_servers: int) -> list[tuple[int, int]]:
    """[start, stop) of each server's slice: contiguous, in server order, sizes differ by <= 1.

    >>> dense_ranges(10, 3)
    [(0, 4), (4, 7), (7, 10)]
    """
    base, extra = divmod(size, num_servers)
    out, start = [], 0
    for i in range(num_servers):
        stop = start + base + (1 if i < extra else 0)
        out.append((start, stop))
        start = stop
    return out


def sparse_servers(keys: np.ndarray, num_servers: int) -> np.ndarray:
    """The server index of every key (a hash, so consecutive ids spread evenly)."""
    if num_servers == 1:
        return np.zeros(len(keys), dtype=np.int64)
    with np.errstate(over="ignore"):
        h = mix64(keys.view(np.uint64) + _GOLDEN)
    return (h % np.uint64(num_servers)).astype(np.int64)
