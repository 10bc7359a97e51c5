"""Data parallelism on the runtime (parallel.py): DataParallel keeps a model's replicas
identical (rank 0's parameters broadcast, gradients averaged), all_reduce_gradients
averages gradients in flat buckets whose reductions overlap the packing of the next."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from .collective import ops
from .collective.errors import CollectiveError
from .collective.group import Group, runtime
from .collective.reduce_op import ReduceOp

__all__ = ["BUCKET_BYTES", "DataParallel", "all_reduce_gradients"]

BUCKET_BYTES = 25 << 20


def _xp(a: Any) -> Any:
    if type(a).__module__.split(".")[0] == "cupy":
        import cupy

        return cupy
    import numpy

    return numpy


def all_reduce_gradients(
    grads: Iterable[Any],
    group: Group | None = None,
    bucket_bytes: int = BUCKET_BYTES,
    op: Any = ReduceOp.AVG,
) -> None:
    """Average (by default) `grads` across the group, in place: the arrays are packed into
    flat buckets of up to `bucket_bytes`, one asynchronous all_reduce per bucket, so
    packing the next bucket overlaps with reducing the previous one. None entries are skipped."""
    pending: list[tuple[Any, Any, list[Any]]] = []
    bucket: list[Any] = []
    size = 0

    def launch() -> None:
        nonlocal bucket, size
        if not bucket:
            return
        xp = _xp(bucket[0])
        flat = xp.concatenate([g.reshape(-1) for g in bucket])
        pending.append((ops.all_reduce(flat, op, group, sync_op=False), flat, bucket))
        bucket, size = [], 0

    for g in grads:
        if g is None:
            continue
        if bucket and (g.dtype != bucket[0].dtype or size + g.nbytes > bucket_bytes):
            launch()
        bucket.append(g)
        size += g.nbytes
    launch()
    for task, flat, members in pending:
        task.wait()
        off = 0
        for g in members:
            g[...] = flat[off : off + g.size].reshape(g.shape)
            off += g.size


class DataParallel:
    """Wrap a model so its replicas stay identical across ranks.

    The model's `parameters()` yield objects with `.data` and `.grad` arrays. Rank 0's
    parameters are broadcast at construction; after each backward, `sync_gradients()`
    averages the gradients (see all_reduce_gradients). Calling the wrapper calls the model;
    other attributes are the model's.
    """

    def __init__(self, model: Any, bucket_bytes: int = BUCKET_BYTES, group: Group | None = None):
        if bucket_bytes <= 0:
            raise ValueError(f"DataParallel: bucket_bytes={bucket_bytes} must be positive")
        self._layers = model
        self.bucket_bytes = int(bucket_bytes)
        self.group = group
        g = group or runtime.default
        if g is None:
            raise CollectiveError("DataParallel: call init_parallel_env() first")
        src = g.ranks[0]
        tasks = [
            ops.broadcast(p.data, src=src, group=group, sync_op=False) for p in model.parameters()
        ]
        for t in tasks:
            t.wait()  # type: ignore[union-attr]

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        model = self._layers
        return model(*args, **kwargs) if callable(model) else model.forward(*args, **kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.__dict__["_layers"], name)

    def parameters(self) -> Any:
        return self._layers.parameters()

    def sync_gradients(self) -> None:
        grads = []
        for p in self._layers.parameters():
            if p.grad is None:
                p.grad = _xp(p.data).zeros_like(p.data)
            grads.append(p.grad)
        all_reduce_gradients(grads, self.group, self.bucket_bytes)
