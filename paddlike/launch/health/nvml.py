"""GPU health through NVML (``libnvidia-ml.so.1`` through ctypes, as `context.devices`
finds GPUs), behind one small interface, `GpuSource`, so that a test can give a
stand-in: no GPU exists where the suite runs.

What is read per GPU (each None where the GPU or driver does not support it):

| reading             | NVML call                                         | a fault when          |
| ------------------- | ------------------------------------------------- | --------------------- |
| ecc_uncorrectable   | nvmlDeviceGetTotalEccErrors(UNCORRECTED, VOLATILE)| > 0                   |
| retired_pending     | nvmlDeviceGetRetiredPagesPendingStatus            | true (needs a reset)  |
| remap_pending       | nvmlDeviceGetRemappedRows (isPending)             | true (needs a reset)  |
| remap_failed        | nvmlDeviceGetRemappedRows (failureOccurred)       | true                  |
| throttle            | nvmlDeviceGetCurrentClocksThrottleReasons         | a slowdown bit below  |
"""

from __future__ import annotations

from paddlike.launch import NamedTuple

TYPE_CHECKING = False  # typing's, without importing typing
if TYPE_CHECKING:
    from typing import Protocol
else:
    Protocol = object

NVML_LIBRARY = "libnvidia-ml.so.1"
_SUCCESS = 0
_UNCORRECTED = 1  # nvmlMemoryErrorType_t NVML_MEMORY_ERROR_TYPE_UNCORRECTED
_VOLATILE = 0  # nvmlEccCounterType_t NVML_VOLATILE_ECC: since the driver loaded

# nvmlClocksThrottleReasons bits that mean the GPU runs slower than it should
THROTTLE_FAULTS = {
    0x8: "hardware slowdown",
    0x20: "software thermal slowdown",
    0x40: "hardware thermal slowdown",
    0x80: "hardware power brake",
}


class GpuReading(NamedTuple):
    """One GPU's health as NVML reports it; None: not supported or not readable."""

    index: int
    uuid: str = ""
    ecc_uncorrectable: int | None = None
    retired_pending: bool | None = None
    remap_pending: bool | None = None
    remap_failed: bool | None = None
    throttle: int | None = None  # the throttle-reason bit mask


class GpuSource(Protocol):
    """Where GPU readings come from: `NvmlSource` on a real node, a stand-in in tests."""

    def read(self) -> list[GpuReading] | None:
        """Every GPU's reading in NVML's order; None when there is no NVML here."""


def gpu_faults(readings: list[GpuReading]) -> list[str]:
    """The faults of this node's GPUs, one short phrase each ("GPU 1: 2 uncorrectable ECC
    errors"); [] when all are healthy. Pure."""
    faults = []
    for g in readings:
        if g.ecc_uncorrectable:
            s = "s" if g.ecc_uncorrectable != 1 else ""
            faults.append(f"GPU {g.index}: {g.ecc_uncorrectable} uncorrectable ECC error{s}")
        if g.retired_pending:
            faults.append(f"GPU {g.index}: retired pages pending (the GPU needs a reset)")
        if g.remap_pending:
            faults.append(f"GPU {g.index}: row remapping pending (the GPU needs a reset)")
        if g.remap_failed:
            faults.append(f"GPU {g.index}: row remapping failed")
        slow = [what for bit, what in THROTTLE_FAULTS.items() if (g.throttle or 0) & bit]
        if slow:
            faults.append(f"GPU {g.index}: {', '.join(slow)}")
    return faults


class NvmlSource:
    """The readings of the NVIDIA driver's NVML library, through ctypes (imported here
    only: a CPU node never pays for it)."""

    def __init__(self, library: str = NVML_LIBRARY) -> None:
        self.library = library

    def read(self) -> list[GpuReading] | None:
        import ctypes

        try:
            nvml = ctypes.CDLL(self.library)
        except OSError:
            return None
        if nvml.nvmlInit_v2() != _SUCCESS:
            return None
        try:
            count = ctypes.c_uint(0)
            if nvml.nvmlDeviceGetCount_v2(ctypes.byref(count)) != _SUCCESS:
                return None
            return [_read_one(nvml, i) for i in range(count.value)]
        finally:
            nvml.nvmlShutdown()


def _call(nvml: object, name: str, *args: object) -> bool:
    """True when NVML has `name` and it succeeded (older drivers lack some calls)."""
    fn = getattr(nvml, name, None)
    return fn is not None and fn(*args) == _SUCCESS


def _read_one(nvml: object, index: int) -> GpuReading:
    import ctypes

    handle = ctypes.c_void_p()
    if not _call(nvml, "nvmlDeviceGetHandleByIndex_v2", index, ctypes.byref(handle)):
        return GpuReading(index)
    buf = ctypes.create_string_buffer(96)
    uuid = (
        buf.value.decode("ascii", "replace")
        if _call(nvml, "nvmlDeviceGetUUID", handle, buf, len(buf))
        else ""
    )
    ecc = ctypes.c_ulonglong(0)
    ecc_ok = _call(
        nvml, "nvmlDeviceGetTotalEccErrors", handle, _UNCORRECTED, _VOLATILE, ctypes.byref(ecc)
    )
    pending = ctypes.c_int(0)
    retired_ok = _call(
        nvml, "nvmlDeviceGetRetiredPagesPendingStatus", handle, ctypes.byref(pending)
    )
    corr, unc, remap_pending, failed = (ctypes.c_uint(0) for _ in range(4))
    remap_ok = _call(
        nvml,
        "nvmlDeviceGetRemappedRows",
        handle,
        ctypes.byref(corr),
        ctypes.byref(unc),
        ctypes.byref(remap_pending),
        ctypes.byref(failed),
    )
    reasons = ctypes.c_ulonglong(0)
    throttle_ok = _call(
        nvml, "nvmlDeviceGetCurrentClocksThrottleReasons", handle, ctypes.byref(reasons)
    )
    return GpuReading(
        index,
        uuid,
        ecc.value if ecc_ok else None,
        bool(pending.value) if retired_ok else None,
        bool(remap_pending.value) if remap_ok else None,
        bool(failed.value) if remap_ok else None,
        reasons.value if throttle_ok else None,
    )
