"""How the CPU backend cuts arrays into pieces: slices per rank, chunks per buffer, byte views.

Pure functions shared by the shared-memory and TCP algorithms, so both cut the same way.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
from collections.abc import Sequence

import numpy as np

__all__ = [
    "bounds", "byte_view", "copy_rows", "fingerprint", "flat_bytes", "ranges", "shm_buffer_bytes",
]  # fmt: skip

SHM_BUFFER_ENV = "PADDLIKE_SHM_BUFFER_BYTES"
MAX_SHM_BUFFER = 4 << 20
MIN_SHM_BUFFER = 256 << 10
_L3_SIZE = "/sys/devices/system/cpu/cpu0/cache/index3/size"


def _last_level_cache() -> int:
    """This machine's L3 in bytes (Linux sysfs, e.g. "32768K"), or 0 when unknown."""
    with contextlib.suppress(OSError, ValueError), open(_L3_SIZE) as f:
        text = f.read().strip().upper()
        scale = {"K": 1 << 10, "M": 1 << 20}.get(text[-1:], 1)
        return int(text.rstrip("KM")) * scale
    return 0


def shm_buffer_bytes(ranks: int) -> int:
    """Bytes of one shared-memory buffer (each rank has two): PADDLIKE_SHM_BUFFER_BYTES, else
    sized so that the group's buffers take at most half the L3 (what a chunk's peers read
    back stays in cache while the arrays stream through), within 256 KiB .. 4 MiB."""
    raw = os.environ.get(SHM_BUFFER_ENV, "").strip()
    if raw:
        try:
            value = int(raw)
        except ValueError:
            why = f"environment variable {SHM_BUFFER_ENV}={raw!r} is not bytes"
            raise ValueError(why) from None
    else:
        cache = _last_level_cache() or 32 << 20
        value = max(MIN_SHM_BUFFER, min(MAX_SHM_BUFFER, cache // 2 // (2 * max(ranks, 1))))
    return max(4096, value // 4096 * 4096)


def bounds(n_items: int, parts: int, k: int) -> tuple[int, int]:
    """Slice k of `parts` near-equal slices of range(n_items)."""
    base, extra = divmod(n_items, parts)
    lo = k * base + min(k, extra)
    return lo, lo + base + (1 if k < extra else 0)


def flat_bytes(x: np.ndarray) -> np.ndarray:
    return x.reshape(-1).view(np.uint8)


def byte_view(x: np.ndarray) -> memoryview:
    return memoryview(flat_bytes(x))


def copy_rows(dst: np.ndarray, rows: np.ndarray, a: int) -> None:
    """dst = bytes a .. a + dst.size of `rows` (2-D uint8, contiguous rows, any row
    stride) read in C order: a partial first row, whole rows, a partial last row."""
    width = rows.shape[1]
    if dst.size == 0:
        return
    b = a + dst.size
    r0, c0 = divmod(a, width)
    r1, c1 = divmod(b, width)
    if r0 == r1:
        dst[:] = rows[r0, c0:c1]
        return
    pos = 0
    if c0:
        dst[: width - c0] = rows[r0, c0:]
        pos, r0 = width - c0, r0 + 1
    whole = (r1 - r0) * width
    dst[pos : pos + whole].reshape(r1 - r0, width)[...] = rows[r0:r1]
    if c1:
        dst[pos + whole :] = rows[r1, :c1]


def fingerprint(sizes: Sequence[int]) -> int:
    """64 bits that differ, in practice, for any two different lists of sizes."""
    data = b"".join(int(v).to_bytes(8, "little") for v in sizes)
    return int.from_bytes(hashlib.blake2b(data, digest_size=8).digest(), "little")


def ranges(total: int, step: int) -> list[tuple[int, int]]:
    """[(a, b)] covering range(total) in pieces of `step`; one empty piece when total is 0,
    so every rank still takes the same number of steps."""
    if total <= 0:
        return [(0, 0)]
    return [(a, min(total, a + step)) for a in range(0, total, step)]
