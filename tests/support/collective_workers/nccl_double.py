"""Worker: paddlike's NCCL backend on the CPU double of CuPy's binding (tests/support/doubles on
PYTHONPATH), host and device arrays in one job. `nccl_double.py OUT MODE` writes
OUT/rank<r>.json: {"failures": [...], ...}. MODE is one of MODES below."""

from __future__ import annotations

import json
import os
import sys
import threading
import time
from collections.abc import Callable

import cupy as cp
import numpy as np

import paddlike.distributed as dist
from paddlike.distributed.collective.errors import CollectiveError, CollectiveTimeoutError

DTYPES = ["float16", "float32", "float64", "int8", "uint8", "int32", "int64", "uint32",
          "uint64", "bool"]  # fmt: skip
OPS = ["SUM", "MAX", "MIN", "PROD", "AVG"]
NP_OPS: dict[str, Callable] = {"SUM": np.add, "MAX": np.maximum, "MIN": np.minimum,
                               "PROD": np.multiply, "AVG": np.add}  # fmt: skip


class Checks:
    def __init__(self) -> None:
        self.failures: list[str] = []
        self.extra: dict = {}

    def equal(self, name: str, got, want) -> None:
        got = cp.asnumpy(got) if isinstance(got, cp.ndarray) else np.asarray(got)
        want = np.asarray(want, np.float64)
        if got.shape != want.shape or not np.allclose(got.astype(np.float64), want):
            self.failures.append(f"{name}: {got.tolist()} != {want.tolist()}")

    def raises(self, name: str, kind: type, words: str, fn: Callable) -> None:
        try:
            fn()
        except kind as exc:
            if words not in str(exc):
                self.failures.append(f"{name}: {words!r} not in {exc}")
            return
        except Exception as exc:
            self.failures.append(f"{name}: raised {type(exc).__name__}: {exc}")
            return
        self.failures.append(f"{name}: did not raise")


def values(rank: int, dtype: str, n: int = 6) -> np.ndarray:
    if dtype == "bool":
        return np.array([(rank + k) % 2 == 0 for k in range(n)])
    return (np.arange(n) % 3 + rank + 1).astype(dtype)


def reduced(op: str, dtype: str, world: int) -> np.ndarray:
    parts = [values(r, dtype) for r in range(world)]
    out = parts[0].copy()
    for p in parts[1:]:
        out = NP_OPS[op](out, p).astype(parts[0].dtype)
    return out / world if op == "AVG" else out


def matrix(c: Checks, me: int, n: int) -> None:
    """Every op x dtype x ReduceOp on device arrays, and the operations without a ReduceOp."""
    for dtype in DTYPES:
        for op in OPS:
            if op == "AVG" and dtype not in ("float16", "float32", "float64"):
                continue
            rop = getattr(dist.ReduceOp, op)
            x = cp.asarray(values(me, dtype))
            dist.all_reduce(x, rop)
            c.equal(f"all_reduce {op} {dtype}", x, reduced(op, dtype, n))
            x = cp.asarray(values(me, dtype))
            dist.reduce(x, dst=n - 1, op=rop)
            c.equal(f"reduce {op} {dtype}", x,
                    reduced(op, dtype, n) if me == n - 1 else values(me, dtype))  # fmt: skip
            out = cp.asarray(np.zeros(6, dtype))
            dist.reduce_scatter(out, [cp.asarray(values(me + k, dtype)) for k in range(n)], rop)
            want = [values(r + me, dtype) for r in range(n)]
            total = want[0].copy()
            for w in want[1:]:
                total = NP_OPS[op](total, w).astype(want[0].dtype)
            c.equal(f"reduce_scatter {op} {dtype}", out, total / n if op == "AVG" else total)
        x = cp.asarray(values(me, dtype))
        dist.broadcast(x, src=1)
        c.equal(f"broadcast {dtype}", x, values(1, dtype))
        outs: list = []
        dist.all_gather(outs, cp.asarray(values(me, dtype)))
        for k in range(n):
            c.equal(f"all_gather[{k}] {dtype}", outs[k], values(k, dtype))
        gathered = [] if me == 0 else None
        dist.gather(cp.asarray(values(me, dtype)), gathered, dst=0)
        for k in range(n if me == 0 else 0):
            c.equal(f"gather[{k}] {dtype}", gathered[k], values(k, dtype))  # type: ignore[index]
        x = cp.asarray(np.zeros(6, dtype))
        dist.scatter(x, [cp.asarray(values(10 + k, dtype)) for k in range(n)] if me == 1 else None,
                     src=1)  # fmt: skip
        c.equal(f"scatter {dtype}", x, values(10 + me, dtype))
        outs = []
        dist.all_to_all(outs, [cp.asarray(values(me * n + k, dtype)) for k in range(n)])
        for k in range(n):
            c.equal(f"all_to_all[{k}] {dtype}", outs[k], values(k * n + me, dtype))
        if me in (0, 1):
            x = cp.asarray(values(me, dtype) if me == 0 else np.zeros(6, dtype))
            (dist.send if me == 0 else dist.recv)(x, 1 - me)
            c.equal(f"send/recv {dtype}", x, values(0, dtype))


def mixed(c: Checks, me: int, n: int) -> None:
    """Host and device arrays in one job, both kinds in every group; the kind's errors."""
    c.extra["backend"] = dist.get_backend()
    h = np.full(4, me + 1.0, np.float32)
    dist.all_reduce(h)
    c.equal("host all_reduce", h, np.full(4, n * (n + 1) / 2))
    c.extra["host_transport"] = dist.get_group(0).lanes["host"].comm.transport
    d = cp.asarray(np.full(4, me + 1.0, np.float32))
    dist.all_reduce(d)
    c.equal("device all_reduce", d, np.full(4, n * (n + 1) / 2))
    c.extra["device_transport"] = dist.get_group(0).lanes["device"].comm.transport
    c.raises("int16 on NCCL", TypeError, "dtype int16 is not supported by NCCL",
             lambda: dist.all_reduce(cp.asarray(np.ones(2, np.int16))))  # fmt: skip
    c.raises("mixed kinds", TypeError, "pass one kind throughout",
             lambda: dist.all_gather([np.zeros(2)] * n, cp.asarray(np.zeros(2))))  # fmt: skip
    d = cp.asarray(np.full(2, me, np.uint64))
    dist.all_reduce(d)  # the group survived the refusals
    c.equal("after the refusals", d, np.full(2, n * (n - 1) / 2))
    # uneven all_gather: this rank's slot another shape of the same size
    outs = [cp.asarray(np.zeros((k + 1, 2) if k == me else (2 * (k + 1),), np.float32))
            for k in range(n)]  # fmt: skip
    dist.all_gather(outs, cp.asarray(np.full(2 * (me + 1), me, np.float32)))
    for k in range(n):
        c.equal(f"uneven all_gather[{k}]", outs[k].reshape(-1), np.full(2 * (k + 1), k))
    # sub-groups of both kinds; a rank outside is refused
    sub = dist.new_group([0, n - 1])
    for make in (np.asarray, cp.asarray):
        x = make(np.full(3, me + 1, np.int32))
        if me in (0, n - 1):
            dist.all_reduce(x, group=sub)
            c.equal(f"sub-group {make.__module__}", x, np.full(3, n + 1))
        else:
            c.raises("outside the sub-group", CollectiveError, "not a member",
                     lambda x=x: dist.all_reduce(x, group=sub))  # fmt: skip
    # asynchronous tasks on two groups, in both orders
    g1, g2 = dist.new_group(), dist.new_group()
    for i in range(10):
        a = cp.asarray(np.full(1024, me + i, np.float32))
        b = cp.asarray(np.full(8, me * i, np.float32))
        pairs = [(a, g1), (b, g2)] if i % 2 == 0 else [(b, g2), (a, g1)]
        tasks = [dist.all_reduce(x, group=g, sync_op=False) for x, g in pairs]
        for t in tasks:
            t.wait()
        c.equal(f"async a #{i}", a, np.full(1024, sum(r + i for r in range(n))))
        c.equal(f"async b #{i}", b, np.full(8, sum(r * i for r in range(n))))
    # DataParallel on either kind
    for xp in (np, cp):
        model = Model(xp, me)
        ddp = dist.DataParallel(model)
        c.equal(f"DataParallel broadcast {xp.__name__}", model.w.data, np.arange(4.0))
        model.w.grad = xp.asarray(np.full(4, float(me)))
        ddp.sync_gradients()
        c.equal(f"DataParallel grads {xp.__name__}", model.w.grad, np.full(4, (n - 1) / 2))
    # the global view's cpu and cuda placements in one job
    ref = np.arange(2.0 * n * 3).reshape(2 * n, 3)
    for device in ("cpu", "cuda"):
        p = dist.placement(device, ranks=list(range(n)))
        x = dist.global_array(ref, placement=p, sbp=dist.sbp.split(0))
        y = x.to_global(sbp=dist.sbp.broadcast)
        c.equal(f"global view {device}", y.numpy(), ref)
        kind = type(y.to_local()).__module__.split(".")[0]
        if kind != ("cupy" if device == "cuda" else "numpy"):
            c.failures.append(f"global view {device}: local piece is {kind}")


class Param:
    def __init__(self, data) -> None:
        self.data, self.grad = data, None


class Model:
    def __init__(self, xp, me: int) -> None:
        self.w = Param(xp.asarray(np.arange(4.0) + (100 if me else 0)))

    def parameters(self):
        return [self.w]


def deadline(c: Checks, me: int, n: int) -> None:
    """A device collective a rank never joins: aborted at the group's deadline; the default
    group goes on."""
    g = dist.new_group(timeout=60)
    x = cp.asarray(np.ones(4, np.float32))
    dist.all_reduce(x, group=g)  # the communicator exists on every rank
    g.timeout = 1.0
    if me == 0:
        start = time.monotonic()
        c.raises("deadline", CollectiveTimeoutError, "the communicator was aborted",
                 lambda: dist.all_reduce(x, group=g))  # fmt: skip
        c.extra["waited"] = time.monotonic() - start
        c.raises("after abort", CollectiveError, "cannot be used after an earlier failure",
                 lambda: dist.all_reduce(x, group=g))  # fmt: skip
    y = cp.asarray(np.ones(2, np.float32))
    dist.all_reduce(y)
    c.equal("default group after the abort", y, np.full(2, n))


def per_thread_stream(c: Checks, me: int, n: int) -> None:
    """CUPY_CUDA_PER_THREAD_DEFAULT_STREAM=1: an async task is ordered and waited for on
    the caller's stream, not the queue thread's."""
    for i in range(3):
        x = cp.asarray(np.zeros(64, np.float32))
        x += me + i
        task = dist.all_reduce(x, sync_op=False)
        task.wait()
        want = np.full(64, sum(r + i for r in range(n)))
        c.equal(f"async on the per-thread stream #{i}", x, want)


def later_work(c: Checks, me: int, n: int) -> None:
    """The caller's later work on the stream does not count against a task's deadline."""
    from cupy.cuda import streams

    x = cp.asarray(np.ones(8, np.float32))
    dist.all_reduce(x)  # the communicator exists
    dist.get_group(0).timeout = 1.5
    stream = cp.cuda.Stream(non_blocking=True)
    with stream:
        task = dist.all_reduce(x, sync_op=False)
        # the queue thread has issued the call and marked its end (code that marks no end
        # goes on after 5 s)
        streams.wait_issued(stream, 1, timeout=5, records=1)
        streams.busy(4.0)  # the caller's next kernel
        try:
            task.wait()
        except Exception as exc:
            c.failures.append(f"the task failed: {exc}")
    c.equal("later work", x, np.full(8, n * n))
    stream.synchronize()


def teardown(c: Checks, me: int, n: int) -> None:
    """A clean end destroys the communicators (abort would drop work in flight)."""
    x = cp.asarray(np.ones(8, np.float32))
    dist.all_reduce(x)


MODES = {"matrix": matrix, "mixed": mixed, "deadline": deadline,
         "per_thread_stream": per_thread_stream, "later_work": later_work,
         "teardown": teardown}  # fmt: skip


def main() -> None:
    out, mode = sys.argv[1], sys.argv[2]
    dist.init_parallel_env(backend=os.environ.get("BACKEND", "auto"), timeout=60)
    me, n = dist.get_rank(), dist.get_world_size()
    c = Checks()
    MODES[mode](c, me, n)
    with open(os.path.join(out, f"rank{me}.json"), "w") as f:
        json.dump({"failures": c.failures, **c.extra}, f)
    dist.barrier()
    dist.destroy_process_group()
    assert threading.active_count() < 50


if __name__ == "__main__":
    main()
