"""`cupy.cuda` of the stand-in: devices, streams, events, the runtime, and `nccl`."""

from __future__ import annotations

import threading
from typing import Any

from . import memory, runtime, streams
from .streams import Event, Stream, get_current_stream

__all__ = ["Device", "Event", "Stream", "get_current_stream", "get_device_id", "memory", "runtime"]

_local = threading.local()


def get_device_id() -> int:
    return getattr(_local, "device", 0)


class Device:
    """A GPU of the stand-in; `use()` makes it this thread's current device."""

    def __init__(self, device: Any = None) -> None:
        self.id = get_device_id() if device is None else runtime.check(int(device))

    def use(self) -> None:
        _local.device = self.id

    def synchronize(self) -> None:
        streams.flush_current()

    def __enter__(self) -> Device:
        stack = getattr(_local, "saved", None)
        if stack is None:
            stack = _local.saved = []
        stack.append(get_device_id())
        self.use()
        return self

    def __exit__(self, *exc: Any) -> None:
        _local.device = _local.saved.pop()

    def __int__(self) -> int:
        return self.id

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Device) and other.id == self.id

    def __hash__(self) -> int:
        return self.id

    def __repr__(self) -> str:
        return f"<CUDA Device {self.id}>"
