"""The NCCL backend, through CuPy's binding (cupy.cuda.nccl); arrays are cupy arrays.

One NCCL communicator per group, made when the group's first device array arrives (or at
init under backend="nccl"). Rank 0 of the group makes the unique id and shares it
through the store (with the group's deadline); then every rank announces in the store that
it is alive and about to build the communicator, and which GPU it uses, and waits for all
the others there (a rank that died is named at the deadline instead of hanging everyone
inside NCCL's constructor; two ranks on one GPU, which NCCL refuses with "Duplicate GPU
detected" or worse, are named with the device before any communicator is built); the
constructor itself runs on a helper thread under the same deadline (nccl_setup.py).
The worker's device (FLAGS_selected_gpus, else LOCAL_RANK) is made current first. Counts
are in elements, buffers are `arr.data.ptr`. `unusable_reason` says why NCCL cannot run
(CuPy's `cupy.cuda.nccl` imports even without libnccl, with `available = False`).

Streams: an operation runs on the CuPy stream that was current in the calling thread
when it was issued — also with `sync_op=False`, where it is carried over to the device
queue's thread (`caller_context`; the per-thread default stream names another stream in
every thread, so there an event marks the caller's work and a stream of the device's own
waits for it). A synchronous call returns, and an asynchronous task's `wait()` returns,
once an event recorded right after the NCCL call has completed; leave the arrays alone
until then. send/recv-based operations (gather, scatter, all_to_all, uneven all_gather)
are grouped inside groupStart()/groupEnd(). AVG is SUM then a division where NCCL lacks
it; bool reduces as uint8 with SUM -> MAX and PROD -> MIN (or / and).

Deadlines: NCCL calls return at once and run on the stream; each operation then waits
for its event on a helper thread, and if the deadline passes first the communicator is
aborted (`abort()` on every error path: destroy waits for peers). A clean teardown
(`close()`) destroys it, which lets what is in flight finish.

This module imports CuPy only inside functions: `import paddlike.distributed` works
without it.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import numpy as np

from . import keys as K
from .backend import Communicator
from .errors import CollectiveError, CollectiveTimeoutError
from .nccl_setup import (
    await_peers,
    build_with_deadline,
    claim_gpu,
    decode_unique_id,
    encode_unique_id,
    gpu_identity,
    refuse_shared_gpu,
)
from .reduce_op import ReduceOp

__all__ = ["NcclCommunicator", "available", "caller_context", "unusable_reason"]

DESTROY_SECONDS = 10.0

_DTYPES = {
    "float16": "NCCL_FLOAT16",
    "float32": "NCCL_FLOAT32",
    "float64": "NCCL_FLOAT64",
    "int8": "NCCL_INT8",
    "uint8": "NCCL_UINT8",
    "int32": "NCCL_INT32",
    "uint32": "NCCL_UINT32",
    "int64": "NCCL_INT64",
    "uint64": "NCCL_UINT64",
    "bool": "NCCL_UINT8",
}
_OPS = {
    ReduceOp.SUM: "NCCL_SUM",
    ReduceOp.AVG: "NCCL_SUM",
    ReduceOp.PROD: "NCCL_PROD",
    ReduceOp.MAX: "NCCL_MAX",
    ReduceOp.MIN: "NCCL_MIN",
}
_BOOL_OPS = {ReduceOp.SUM: ReduceOp.MAX, ReduceOp.PROD: ReduceOp.MIN}


NCCL_NAMES = ("NcclCommunicator", "get_unique_id", "groupStart", "groupEnd")


def unusable_reason(device_id: int = 0) -> str | None:
    """Why NCCL cannot run here on GPU `device_id` (None: it can). `cupy.cuda.nccl`
    imports even when libnccl cannot be loaded: then it says `available = False` and
    lacks NCCL's names, so both are checked, not the import alone."""
    try:
        import cupy
    except Exception as exc:
        return f"CuPy cannot be imported ({exc})"
    try:
        from cupy.cuda import nccl
    except Exception as exc:
        return f"cupy.cuda.nccl cannot be imported ({exc})"
    missing = [n for n in NCCL_NAMES if not hasattr(nccl, n)]
    if not getattr(nccl, "available", False) or missing:
        return (
            "CuPy could not load libnccl (cupy.cuda.nccl.available is False); install "
            "nvidia-nccl-cu12 (paddlike[gpu]) or put libnccl.so.2 on LD_LIBRARY_PATH"
        )
    try:
        count = int(cupy.cuda.runtime.getDeviceCount())
    except Exception as exc:
        return f"CUDA cannot count the GPUs ({exc})"
    if count <= device_id:
        return f"GPU {device_id} is not visible (CUDA sees {count})"
    return None


def available(device_id: int = 0) -> bool:
    """CuPy imports, can load libnccl, and sees GPU `device_id`."""
    return unusable_reason(device_id) is None


_side_streams: dict[int, Any] = {}


def caller_context(device_id: int) -> contextlib.AbstractContextManager[None]:
    """Taken in the calling thread, entered where the operation runs (that thread, or the
    device queue's): this device, and the caller's CUDA stream. The per-thread default
    stream (CUPY_CUDA_PER_THREAD_DEFAULT_STREAM=1) names another stream in every thread,
    so for another thread an event marks the caller's work so far and the operation runs
    on a stream of its own that waits for that event."""
    import cupy

    cuda = cupy.cuda
    with cuda.Device(device_id):
        stream = cuda.get_current_stream()
    caller = threading.get_ident()
    ready = None
    if stream.ptr == getattr(cuda.runtime, "streamPerThread", 2):  # cudaStreamPerThread
        ready = cuda.Event(disable_timing=True)
        ready.record(stream)

    @contextlib.contextmanager
    def on_callers_stream() -> Iterator[None]:
        cuda.Device(device_id).use()
        target = stream
        if ready is not None and threading.get_ident() != caller:
            target = _side_streams.get(device_id)
            if target is None:
                target = _side_streams[device_id] = cuda.Stream(non_blocking=True)
            target.wait_event(ready)
        with target:
            yield

    return on_callers_stream()


def nccl_dtype_name(dtype: Any, what: str) -> str:
    name = np.dtype(dtype).name
    if name not in _DTYPES:
        raise TypeError(
            f"{what}: dtype {name} is not supported by NCCL; use one of {sorted(_DTYPES)}"
        )
    return _DTYPES[name]


def nccl_op(op: ReduceOp, dtype: Any) -> tuple[str, bool]:
    """(NCCL op name, divide afterwards) for `op` on `dtype`."""
    if np.dtype(dtype) == np.bool_:
        op = _BOOL_OPS.get(op, op)
    return _OPS[op], op is ReduceOp.AVG


class NcclCommunicator(Communicator):
    def __init__(
        self,
        store: Any,
        prefix: str,
        rank: int,
        global_ranks: Sequence[int],
        device_id: int,
        timeout: float,
        exited: Callable[[int], bool] | None = None,
    ) -> None:
        """`exited(group rank)`: whether that peer's process is gone (the setup waits name
        it at once instead of at the deadline)."""
        import cupy
        from cupy.cuda import nccl

        from .device import wait_keys

        deadline = time.monotonic() + timeout
        self._cp, self._nccl = cupy, nccl
        self.name, self.rank, self.size = prefix, rank, len(global_ranks)
        self.global_ranks = list(global_ranks)
        self.device = cupy.cuda.Device(device_id)
        self.device.use()  # before the communicator: NCCL binds it to the current device
        key = K.nccl_uid(prefix)
        if rank == 0:
            store.set(key, encode_unique_id(nccl.get_unique_id()))
        try:
            wait_keys(store, [key], self.global_ranks[:1], deadline, exited,
                      f"init of group {prefix.rsplit('/', 1)[-1]}")  # fmt: skip
            raw = store.get(key, timeout=max(0.001, deadline - time.monotonic()))
        except CollectiveError:
            raise
        except Exception as exc:
            raise CollectiveTimeoutError(
                f"init: rank {self.global_ranks[0]} did not publish the NCCL unique id "
                f"within {timeout:g} s: {exc}"
            ) from None
        uid = decode_unique_id(raw)
        group = prefix.rsplit("/", 1)[-1]
        claim_gpu(store, prefix, rank, self.global_ranks, gpu_identity(device_id))
        await_peers(store, prefix, rank, self.global_ranks, deadline, exited)
        refuse_shared_gpu(store, prefix, rank, self.global_ranks, deadline)

        def build() -> Any:
            self.device.use()  # the current device is per thread
            return nccl.NcclCommunicator(self.size, uid, rank)

        self.comm = build_with_deadline(
            build, deadline, f"init: NCCL communicator of group {group}",
            lambda comm: comm.abort(),
        )  # fmt: skip
        self.transport = "nccl"

    # --- helpers -------------------------------------------------------------------------

    def _dt(self, x: Any, what: str) -> int:
        return getattr(self._nccl, nccl_dtype_name(x.dtype, what))

    def _stream(self) -> int:
        return self._cp.cuda.get_current_stream().ptr

    def _divide(self, x: Any) -> Callable[[], None]:
        """AVG where NCCL lacks it: SUM, then this division (after the call finished)."""

        def divide() -> None:
            x.__itruediv__(self.size)  # in place, like x /= size

        return divide

    def _finish(
        self, deadline: float, what: str, then: Callable[[], None] | None = None
    ) -> None:
        """Wait for the NCCL call just issued (an event recorded after it, not the whole
        stream: the caller's later work on that stream is not the collective's), or abort
        the communicator at the deadline. `then` (a local step on the result: a division,
        a copy) runs after, on the same stream, and is waited for too."""
        event = self._cp.cuda.Event(disable_timing=True)
        event.record(self._cp.cuda.get_current_stream())
        done = threading.Event()
        errors: list[BaseException] = []

        def wait() -> None:
            try:
                self.device.use()  # the current device is per thread
                event.synchronize()
            except BaseException as exc:
                errors.append(exc)
            finally:
                done.set()

        threading.Thread(target=wait, name=f"nccl-wait-{what}", daemon=True).start()
        if not done.wait(max(0.0, deadline - time.monotonic())):
            self.abort()
            raise CollectiveTimeoutError(
                f"{what}: NCCL did not complete before the deadline; a rank of group "
                f"{self.global_ranks} did not join (or died), or the ranks issued device "
                f"collectives in different orders (e.g. async ops on two groups); the "
                f"communicator was aborted"
            )
        if errors:
            self.abort()
            raise CollectiveError(f"{what}: NCCL failed: {errors[0]}")
        check = getattr(self.comm, "check_async_error", None)
        if check is not None:
            try:
                check()
            except Exception as exc:
                self.abort()
                raise CollectiveError(f"{what}: NCCL failed: {exc}") from None
        if then is not None:
            then()
            after = self._cp.cuda.Event(disable_timing=True)
            after.record(self._cp.cuda.get_current_stream())
            after.synchronize()

    def abort(self) -> None:
        """After an error: drops what is in flight, waits for no peer."""
        comm, self.comm = getattr(self, "comm", None), None
        if comm is not None:
            with contextlib.suppress(Exception):
                comm.abort()

    def close(self) -> None:
        """A clean teardown: destroy lets NCCL finish what is in flight (abort would drop
        it); past DESTROY_SECONDS it aborts instead."""
        comm, self.comm = getattr(self, "comm", None), None
        if comm is None:
            return
        try:
            build_with_deadline(lambda: comm.destroy(), time.monotonic() + DESTROY_SECONDS,
                                f"{self.name}: NCCL destroy", lambda _: None)  # fmt: skip
        except CollectiveError:
            with contextlib.suppress(Exception):
                comm.abort()

    def _grouped(self, sends: list[tuple[Any, int]], recvs: list[tuple[Any, int]], what: str):
        nccl, stream = self._nccl, self._stream()
        nccl.groupStart()
        try:
            for arr, peer in sends:
                self.comm.send(arr.data.ptr, arr.size, self._dt(arr, what), peer, stream)
            for arr, peer in recvs:
                self.comm.recv(arr.data.ptr, arr.size, self._dt(arr, what), peer, stream)
        finally:
            nccl.groupEnd()

    # --- operations ------------------------------------------------------------------------

    def all_reduce(self, x: Any, op: ReduceOp, deadline: float, out: Any = None) -> None:
        """In place, or into `out` (NCCL's allReduce takes separate send/receive buffers)."""
        self.device.use()  # current device is per thread; async ops run on another
        name, divide = nccl_op(op, x.dtype)
        dst = x if out is None else out
        self.comm.allReduce(x.data.ptr, dst.data.ptr, x.size, self._dt(x, "all_reduce"),
                            getattr(self._nccl, name), self._stream())  # fmt: skip
        self._finish(deadline, "all_reduce", self._divide(dst) if divide else None)

    def reduce(self, x: Any, root: int, op: ReduceOp, deadline: float) -> None:
        self.device.use()  # current device is per thread; async ops run on another
        name, divide = nccl_op(op, x.dtype)
        out = x if self.rank == root else self._cp.empty_like(x)
        self.comm.reduce(x.data.ptr, out.data.ptr, x.size, self._dt(x, "reduce"),
                         getattr(self._nccl, name), root, self._stream())  # fmt: skip
        then = self._divide(x) if divide and self.rank == root else None
        self._finish(deadline, "reduce", then)

    def broadcast(self, x: Any, root: int, deadline: float) -> None:
        self.device.use()  # current device is per thread; async ops run on another
        self.comm.bcast(x.data.ptr, x.size, self._dt(x, "broadcast"), root, self._stream())
        self._finish(deadline, "broadcast")

    def all_gather(self, outs: list[Any], x: Any, deadline: float) -> None:
        self.device.use()  # current device is per thread; async ops run on another
        if all(o.size == x.size for o in outs):
            flat = self._cp.empty((self.size, x.size), x.dtype)
            self.comm.allGather(x.data.ptr, flat.data.ptr, x.size, self._dt(x, "all_gather"),
                                self._stream())  # fmt: skip

            def unpack() -> None:
                for k, o in enumerate(outs):
                    o[...] = flat[k].reshape(o.shape)

            self._finish(deadline, "all_gather", unpack)
            return
        else:  # uneven: grouped point-to-point
            peers = [k for k in range(self.size) if k != self.rank]
            own = outs[self.rank]
            own[...] = x.reshape(own.shape)  # same size, maybe another shape
            self._grouped([(x, k) for k in peers], [(outs[k], k) for k in peers], "all_gather")
        self._finish(deadline, "all_gather")

    def gather(self, x: Any, outs: list[Any] | None, root: int, deadline: float) -> None:
        self.device.use()  # current device is per thread; async ops run on another
        if self.rank == root:
            assert outs is not None
            outs[root][...] = x
            peers = [k for k in range(self.size) if k != root]
            self._grouped([], [(outs[k], k) for k in peers], "gather")
        else:
            self._grouped([(x, root)], [], "gather")
        self._finish(deadline, "gather")

    def scatter(self, x: Any, ins: list[Any] | None, root: int, deadline: float) -> None:
        self.device.use()  # current device is per thread; async ops run on another
        if self.rank == root:
            assert ins is not None
            x[...] = ins[root]
            peers = [k for k in range(self.size) if k != root]
            self._grouped([(ins[k], k) for k in peers], [], "scatter")
        else:
            self._grouped([], [(x, root)], "scatter")
        self._finish(deadline, "scatter")

    def reduce_scatter(self, out: Any, ins: list[Any], op: ReduceOp, deadline: float) -> None:
        self.device.use()  # current device is per thread; async ops run on another
        name, divide = nccl_op(op, out.dtype)
        flat = self._cp.concatenate([a.reshape(-1) for a in ins])
        self.comm.reduceScatter(flat.data.ptr, out.data.ptr, out.size,
                                self._dt(out, "reduce_scatter"), getattr(self._nccl, name),
                                self._stream())  # fmt: skip
        self._finish(deadline, "reduce_scatter", self._divide(out) if divide else None)

    def all_to_all(self, outs: list[Any], ins: list[Any], deadline: float) -> None:
        """ins may be 2-D views with contiguous rows (ops.all_to_all_rows): packed here,
        as NCCL sends contiguous buffers."""
        self.device.use()  # current device is per thread; async ops run on another
        ins = [a if a.flags.c_contiguous else self._cp.ascontiguousarray(a) for a in ins]
        outs[self.rank][...] = ins[self.rank]
        peers = [k for k in range(self.size) if k != self.rank]
        self._grouped([(ins[k], k) for k in peers], [(outs[k], k) for k in peers], "all_to_all")
        self._finish(deadline, "all_to_all")

    def send(self, x: Any, peer: int, deadline: float) -> None:
        self.device.use()  # current device is per thread; async ops run on another
        self.comm.send(x.data.ptr, x.size, self._dt(x, "send"), peer, self._stream())
        self._finish(deadline, "send")

    def recv(self, x: Any, peer: int, deadline: float) -> None:
        self.device.use()  # current device is per thread; async ops run on another
        self.comm.recv(x.data.ptr, x.size, self._dt(x, "recv"), peer, self._stream())
        self._finish(deadline, "recv")

    def barrier(self, deadline: float, leaving: bool = False) -> None:
        self.device.use()  # current device is per thread; async ops run on another
        one = self._cp.zeros(1, self._cp.int32)
        self.comm.allReduce(one.data.ptr, one.data.ptr, 1, self._nccl.NCCL_INT32,
                            self._nccl.NCCL_SUM, self._stream())  # fmt: skip
        self._finish(deadline, "barrier")
