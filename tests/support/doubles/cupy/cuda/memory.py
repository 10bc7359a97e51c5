"""Which device each array of the stand-in was made on, looked up by address.

CuPy allocates on the current device; NCCL given a buffer on another device than its
communicator's fails (invalid argument, or an illegal memory access in the kernel). The
double records every fresh array's address range here so its NCCL can refuse such a call.
"""

from __future__ import annotations

import threading
import weakref
from typing import Any

_lock = threading.Lock()
_spans: dict[int, tuple[int, int, int]] = {}


def register(array: Any, device: int) -> None:
    """Remember `array`'s bytes as on `device` until the array is collected."""
    start = int(array.ctypes.data)
    token = id(array)
    with _lock:
        _spans[token] = (start, start + int(array.nbytes), device)
    weakref.finalize(array, _forget, token)


def _forget(token: int) -> None:
    with _lock:
        _spans.pop(token, None)


def device_of(ptr: int) -> int | None:
    """The device of the live array holding address `ptr`; None when unknown."""
    with _lock:
        for start, end, device in _spans.values():
            if start <= ptr < end:
                return device
    return None
