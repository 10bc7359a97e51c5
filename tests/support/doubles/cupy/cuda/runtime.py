"""The CUDA runtime queries paddlike asks (a stand-in; see the package docstring).

The number of GPUs is CUPY_DOUBLE_GPUS (default 8); each has a PCI bus id and a UUID.
"""

from __future__ import annotations

import os
from typing import Any

streamPerThread = 2
streamLegacy = 1


class CUDARuntimeError(RuntimeError):
    def __init__(self, status: int, text: str = "cudaErrorInvalidDevice") -> None:
        self.status = status
        super().__init__(f"{text}: invalid device ordinal")


def getDeviceCount() -> int:
    return int(os.environ.get("CUPY_DOUBLE_GPUS", "8"))


def check(device: int) -> int:
    if not 0 <= int(device) < getDeviceCount():
        raise CUDARuntimeError(101)
    return int(device)


def deviceGetPCIBusId(device: int) -> str:
    return f"0000:{check(device) + 1:02x}:00.0"


def getDeviceProperties(device: int) -> dict[str, Any]:
    check(device)
    return {"name": b"CPU double of a GPU", "uuid": bytes([0xD0, device + 1]) + bytes(14)}


def runtimeGetVersion() -> int:
    return 12080


def driverGetVersion() -> int:
    return 12080
