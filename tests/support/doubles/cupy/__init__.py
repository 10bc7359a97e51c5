"""A stand-in for CuPy on machines without a GPU, for paddlike's tests only.

Arrays are numpy arrays of the subclass `cupy.ndarray` (so paddlike sees a device array:
`type(x).__module__` is "cupy", `x.data.ptr` is an address); `cupy.cuda` has devices,
streams, events, the runtime's device queries, and a CPU double of CuPy's NCCL binding
(`cupy.cuda.nccl`) whose ranks are real processes. Put this directory's parent
(tests/support/doubles) on PYTHONPATH to use it; never install it.

Streams are modelled as on a GPU, where it matters to NCCL: a collective's result is in
its receive buffer only once its stream (or an event after it) is synchronized, or once
this thread's current stream is touched by a cupy operation; see `cupy.cuda.streams`.
"""

from __future__ import annotations

import functools
from typing import Any

import numpy as _np

from . import cuda

__version__ = "13.6.0+paddlike.double"
__paddlike_double__ = True  # not CuPy: probes (make test-gpu) must not take it for one


class _Pointer:
    """What `ndarray.data` is in CuPy: a memory pointer with `.ptr`."""

    __slots__ = ("ptr",)

    def __init__(self, ptr: int) -> None:
        self.ptr = ptr


def _flush() -> None:
    cuda.streams.flush_current()


class ndarray(_np.ndarray):
    """A "device" array: host memory, touched only after this thread's stream is flushed.

    It lives on the device that was current when it was made (views keep their base's), as
    in CuPy; its memory is registered under that device, so the NCCL double can refuse a
    buffer on another device than its communicator's, as NCCL would."""

    _device_id: int

    def __array_finalize__(self, obj: Any) -> None:
        inherited = getattr(obj, "_device_id", None) if isinstance(obj, ndarray) else None
        self._device_id = cuda.get_device_id() if inherited is None else inherited
        if inherited is None and self.nbytes:
            cuda.memory.register(self, self._device_id)

    @property
    def data(self) -> _Pointer:  # type: ignore[override]
        return _Pointer(self.ctypes.data)

    @property
    def device(self) -> Any:
        return cuda.Device(self._device_id)

    def get(self, stream: Any = None) -> _np.ndarray:
        _flush()
        return _np.array(self).view(_np.ndarray)

    def __array_ufunc__(self, ufunc: Any, method: str, *inputs: Any, **kwargs: Any) -> Any:
        _flush()
        args = [_host(i) for i in inputs]
        out = kwargs.get("out")
        if out:
            kwargs["out"] = tuple(_host(o) for o in out)
        result = getattr(ufunc, method)(*args, **kwargs)
        if out:
            return out[0] if len(out) == 1 else out
        return _device(result)

    def __array_function__(self, func: Any, types: Any, args: Any, kwargs: Any) -> Any:
        _flush()
        return super().__array_function__(func, types, args, kwargs)

    def __getitem__(self, key: Any) -> Any:
        _flush()
        return super().__getitem__(key)

    def __setitem__(self, key: Any, value: Any) -> None:
        _flush()
        super().__setitem__(key, value)

    def __repr__(self) -> str:
        _flush()
        return super().__repr__()


def _host(value: Any) -> Any:
    return value.view(_np.ndarray) if isinstance(value, ndarray) else value


def _device(value: Any) -> Any:
    if isinstance(value, _np.ndarray) and not isinstance(value, ndarray):
        return value.view(ndarray)
    if isinstance(value, (list, tuple)):
        return type(value)(_device(v) for v in value)
    return value


def _wrap(fn: Any) -> Any:
    @functools.wraps(fn)
    def on_device(*args: Any, **kwargs: Any) -> Any:
        _flush()
        return _device(fn(*args, **kwargs))

    return on_device


def asarray(a: Any, dtype: Any = None, order: Any = None) -> ndarray:
    """Host data copied to the "device" (CuPy copies; the result never aliases numpy's)."""
    if isinstance(a, ndarray) and (dtype is None or a.dtype == dtype):
        return a
    return _np.array(a, dtype=dtype, copy=True, order=order or "K").view(ndarray)


def array(a: Any, dtype: Any = None, copy: bool = True, order: str = "K", **kw: Any) -> ndarray:
    if isinstance(a, ndarray) and not copy:
        return a
    _flush()
    return _np.array(_host(a), dtype=dtype, copy=True, order=order, **kw).view(ndarray)


def asnumpy(a: Any, stream: Any = None) -> _np.ndarray:
    _flush()
    return _np.array(a).view(_np.ndarray)


def __getattr__(name: str) -> Any:
    value = getattr(_np, name)
    if callable(value) and not isinstance(value, type):
        value = _wrap(value)
    globals()[name] = value
    return value
