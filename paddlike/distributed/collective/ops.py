"""The collective operations, named and shaped like `paddle.distributed`'s.

Each function checks its arguments (naming any bad one), resolves the group and the
global ranks it was given, then hands the work to the group's communicator through the
group's queue: `sync_op=True` returns when done, `sync_op=False` returns a Task.
Ranks given as `src`/`dst` are global ranks, as in Paddle.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from . import flight
from .checks import SUPPORTED_DTYPES, as_rank, check_array, check_list, check_same
from .errors import CollectiveError, CollectiveTimeoutError, PeerExitedError
from .group import DEVICE, Group, Lane, array_kind, runtime
from .reduce_op import ReduceOp, as_reduce_op, check_op_dtype
from .task import Task

__all__ = [
    "all_gather",
    "all_reduce",
    "all_to_all",
    "alltoall",
    "barrier",
    "broadcast",
    "gather",
    "irecv",
    "isend",
    "recv",
    "reduce",
    "reduce_scatter",
    "scatter",
    "send",
]


def _group(group: Group | None, what: str) -> Group:
    if group is None:
        group = runtime.default
        if group is None:
            raise CollectiveError(
                f"{what}: the process group is not initialized; call "
                f"paddlike.distributed.init_parallel_env() first"
            )
    elif not isinstance(group, Group):
        raise TypeError(f"{what}: group must be a Group from new_group(), got {group!r}")
    if group.rank < 0 or group.closed:
        group.require_member(what)
    return group


def _lane(g: Group, x: Any, what: str, arg: str = "tensor") -> Lane:
    """The lane of `x`'s kind (host: CPU backend, device: NCCL), checked up front so that a
    mistake leaves the group usable: the kind, and on NCCL the dtype."""
    kind = array_kind(x)
    lane = g.lanes.get(kind)
    if lane is None:
        lane = g.lane(kind, what, arg)  # refused, naming the kind and the backend
    if kind is DEVICE:
        from .nccl import nccl_dtype_name

        nccl_dtype_name(x.dtype, what)
    return lane


def _same_kind(items: Any, like: Any, what: str, arg: str) -> None:
    """Every array of a list is of `like`'s kind (no numpy outputs for a cupy input)."""
    kind = array_kind(like)
    for i, item in enumerate(items):
        if array_kind(item) != kind:
            raise TypeError(
                f"{what}: {arg}[{i}] is a {array_kind(item)} array ({type(item).__module__}) "
                f"but the operation's arrays are {kind} arrays; pass one kind throughout"
            )


def _peer(g: Group, rank: Any, what: str, arg: str) -> int:
    """Global rank -> group rank, refused when outside the group."""
    rank = as_rank(rank, what, arg)  # numpy integers too
    k = g.get_group_rank(rank)
    if k < 0:
        raise ValueError(f"{what}: {arg}={rank} is not a rank of group {g.id} (ranks {g.ranks})")
    return k


def _run(
    g: Group,
    what: str,
    fn: Callable[[Any, float], None],
    sync_op: bool,
    tensor: Any = None,
    peer: int = -1,
    lane: Lane | None = None,
) -> Task | None:
    """Every operation passes here: the one place that orders, records and runs them.
    `fn(communicator, deadline)` runs on `lane` (by default `tensor`'s kind's); `tensor`
    and `peer` (a global rank) also describe the operation in the flight record.
    A synchronous operation runs in the caller's thread once the operations queued
    before it are done; one clock read serves its deadline and its flight record."""
    if lane is None:
        lane = g.default_lane(what) if tensor is None else _lane(g, tensor, what)
    # e.g. the caller's CUDA stream, for the queue thread; host lanes have none
    context = None if lane.context is _NO_CONTEXT else lane.context()
    now = _monotonic()
    record = flight.begin(what, g.id, tensor, peer, now)  # in issue order, like the ranks'
    if not sync_op:
        return lane.queue.submit(lambda: _execute(g, lane, what, fn, context, record, None), what)
    if lane.queue.wait_idle():
        now = _monotonic()  # the deadline starts once the earlier operations are done
    _execute(g, lane, what, fn, context, record, now + g.timeout)
    return None


_NO_CONTEXT = contextlib.nullcontext
_AVG = ReduceOp.AVG
_monotonic = time.monotonic


def _execute(
    g: Group,
    lane: Lane,
    what: str,
    fn: Callable[[Any, float], None],
    context: contextlib.AbstractContextManager[None] | None,
    record: Any,
    deadline: float | None,
) -> None:
    """Run one operation on its lane (its deadline: `deadline`, or its timeout from now)
    and record its end; a failure breaks the lane, as the ranks are now out of step."""
    if lane.broken is not None:
        flight.end(record, False)
        why = f"{what}: group {g.id} cannot be used after an earlier failure ({lane.broken})"
        if isinstance(lane.broken, PeerExitedError):  # still a consequence of that exit
            raise PeerExitedError(why, peer=lane.broken.peer)
        raise CollectiveError(why)
    comm = lane.comm
    try:
        if context is None:
            if comm is None:
                comm = lane.communicator()
                deadline = None
            fn(comm, _monotonic() + g.timeout if deadline is None else deadline)
        else:
            with context:
                comm = lane.communicator()
                fn(comm, _monotonic() + g.timeout)
    except BaseException as exc:
        flight.end(record, False)
        # The ranks are now out of step: close the connections so that peers blocked on
        # this rank fail at once (they see it leave) instead of at their deadline.
        lane.broken = exc
        if comm is not None:
            with contextlib.suppress(Exception):
                comm.abort()
        if isinstance(exc, CollectiveTimeoutError) and len(g.lanes) > 1 and \
                lane.kind != DEVICE:  # fmt: skip
            raise CollectiveTimeoutError(
                f"{exc}; or a rank called {what} with a device (cupy) array where this rank "
                f"used a host (numpy) array: one operation needs one kind on every rank"
            ) from None
        raise
    flight.end(record, True)


def all_reduce(
    tensor: Any,
    op: Any = ReduceOp.SUM,
    group: Group | None = None,
    sync_op: bool = True,
    *,
    out: Any = None,
) -> Task | None:
    """Reduce `tensor` over the group, in place on every rank; or, given `out` (an array of
    the same shape and dtype that does not overlap `tensor`), into `out`, leaving `tensor`
    unchanged: no copy of the input first (the global view's P -> B uses it)."""
    g = _group(group, "all_reduce")
    rop = op if type(op) is ReduceOp else as_reduce_op(op)
    check_array(tensor, "all_reduce", "tensor")
    if rop is _AVG:
        check_op_dtype(rop, tensor.dtype, "all_reduce")
    if out is None or out is tensor:
        return _run(g, "all_reduce", lambda c, d: c.all_reduce(tensor, rop, d), sync_op, tensor)
    check_same(out, tensor, "all_reduce", "out")
    _same_kind([out], tensor, "all_reduce", "out")
    if _overlap(out, tensor):
        raise ValueError(
            "all_reduce: argument 'out' overlaps 'tensor' without being the same array; pass "
            "a separate array (or out=None to reduce in place)"
        )

    def into(c: Any, d: float) -> None:
        c.all_reduce(tensor, rop, d, out=out)

    return _run(g, "all_reduce", into, sync_op, tensor)


def _overlap(a: Any, b: Any) -> bool:
    """Whether two arrays may share memory (numpy's or cupy's bounds check: cheap)."""
    if type(a).__module__.split(".")[0] == "cupy":
        import cupy

        return bool(cupy.may_share_memory(a, b))
    return bool(np.may_share_memory(a, b))


def reduce(
    tensor: Any,
    dst: int = 0,
    op: Any = ReduceOp.SUM,
    group: Group | None = None,
    sync_op: bool = True,
) -> Task | None:
    """Reduce `tensor` over the group into rank `dst`'s tensor; the others' stay unchanged."""
    g = _group(group, "reduce")
    rop = as_reduce_op(op)
    check_array(tensor, "reduce", "tensor")
    check_op_dtype(rop, tensor.dtype, "reduce")
    root = _peer(g, dst, "reduce", "dst")
    return _run(g, "reduce", lambda c, d: c.reduce(tensor, root, rop, d), sync_op, tensor, dst)


def broadcast(tensor: Any, src: int = 0, group: Group | None = None, sync_op: bool = True):
    """Copy rank `src`'s tensor into every rank's tensor."""
    g = _group(group, "broadcast")
    check_array(tensor, "broadcast", "tensor")
    root = _peer(g, src, "broadcast", "src")
    return _run(g, "broadcast", lambda c, d: c.broadcast(tensor, root, d), sync_op, tensor, src)


def _fill(outs: Any, like: Any, n: int, what: str, arg: str) -> list[Any]:
    """Paddle passes an empty list to be filled; torch passes n arrays to write into."""
    if isinstance(outs, list) and not outs:
        outs.extend(_empty_like(like) for _ in range(n))
        return outs
    checked = check_list(outs, n, what, arg, dtype=like.dtype)
    _same_kind(checked, like, what, arg)
    return checked


def _empty_like(x: Any) -> Any:
    module = type(x).__module__.split(".")[0]
    if module == "cupy":
        import cupy

        return cupy.empty_like(x)
    import numpy as np

    return np.empty_like(x)


def all_gather(
    tensor_list: list[Any], tensor: Any, group: Group | None = None, sync_op: bool = True
) -> Task | None:
    """tensor_list[k] = rank k's tensor. An empty list is filled with new arrays; a list of
    n arrays is written in place (their shapes may differ when the ranks' tensors do)."""
    g = _group(group, "all_gather")
    check_array(tensor, "all_gather", "tensor")
    outs = _fill(tensor_list, tensor, g.nranks, "all_gather", "tensor_list")
    if outs[g.rank].nbytes != tensor.nbytes:
        raise ValueError(
            f"all_gather: tensor_list[{g.rank}] (this rank's slot) has shape "
            f"{tuple(outs[g.rank].shape)}, but tensor has shape {tuple(tensor.shape)}"
        )
    return _run(g, "all_gather", lambda c, d: c.all_gather(outs, tensor, d), sync_op, tensor)


def gather(
    tensor: Any,
    gather_list: list[Any] | None = None,
    dst: int = 0,
    group: Group | None = None,
    sync_op: bool = True,
) -> Task | None:
    """On rank `dst`, gather_list[k] = rank k's tensor (all tensors have one shape)."""
    g = _group(group, "gather")
    check_array(tensor, "gather", "tensor")
    root = _peer(g, dst, "gather", "dst")
    outs = None
    if g.rank == root:
        if gather_list is None:
            raise ValueError("gather: gather_list is required on the destination rank")
        outs = _fill(gather_list, tensor, g.nranks, "gather", "gather_list")
        for i, o in enumerate(outs):
            check_same(o, tensor, "gather", f"gather_list[{i}]")
    return _run(g, "gather", lambda c, d: c.gather(tensor, outs, root, d), sync_op, tensor, dst)


def scatter(
    tensor: Any,
    tensor_list: list[Any] | None = None,
    src: int = 0,
    group: Group | None = None,
    sync_op: bool = True,
) -> Task | None:
    """tensor = rank `src`'s tensor_list[k] on rank k (all of one shape)."""
    g = _group(group, "scatter")
    check_array(tensor, "scatter", "tensor")
    root = _peer(g, src, "scatter", "src")
    ins = None
    if g.rank == root:
        if tensor_list is None:
            raise ValueError("scatter: tensor_list is required on the source rank")
        ins = check_list(tensor_list, g.nranks, "scatter", "tensor_list")
        _same_kind(ins, tensor, "scatter", "tensor_list")
        for i, a in enumerate(ins):
            check_same(a, tensor, "scatter", f"tensor_list[{i}]")
    return _run(g, "scatter", lambda c, d: c.scatter(tensor, ins, root, d), sync_op, tensor, src)


def reduce_scatter(
    tensor: Any,
    tensor_list: list[Any],
    op: Any = ReduceOp.SUM,
    group: Group | None = None,
    sync_op: bool = True,
) -> Task | None:
    """tensor on rank k = reduction over ranks of their tensor_list[k]."""
    g = _group(group, "reduce_scatter")
    rop = as_reduce_op(op)
    check_array(tensor, "reduce_scatter", "tensor")
    check_op_dtype(rop, tensor.dtype, "reduce_scatter")
    ins = check_list(tensor_list, g.nranks, "reduce_scatter", "tensor_list")
    _same_kind(ins, tensor, "reduce_scatter", "tensor_list")
    for i, a in enumerate(ins):
        check_same(a, tensor, "reduce_scatter", f"tensor_list[{i}]")
    return _run(
        g,
        "reduce_scatter",
        lambda c, d: c.reduce_scatter(tensor, ins, rop, d),
        sync_op,
        tensor,
    )


def all_to_all(
    out_tensor_list: list[Any],
    in_tensor_list: list[Any],
    group: Group | None = None,
    sync_op: bool = True,
) -> Task | None:
    """out_tensor_list[j] on rank k = rank j's in_tensor_list[k] (all of one shape)."""
    g = _group(group, "all_to_all")
    ins = check_list(in_tensor_list, g.nranks, "all_to_all", "in_tensor_list")
    _same_kind(ins, ins[0], "all_to_all", "in_tensor_list")
    for i, a in enumerate(ins):
        check_same(a, ins[0], "all_to_all", f"in_tensor_list[{i}]")
    outs = _fill(out_tensor_list, ins[0], g.nranks, "all_to_all", "out_tensor_list")
    for i, o in enumerate(outs):
        check_same(o, ins[0], "all_to_all", f"out_tensor_list[{i}]")
    return _run(g, "all_to_all", lambda c, d: c.all_to_all(outs, ins, d), sync_op, ins[0])


def all_to_all_rows(
    out_tensor_list: list[Any], in_tensor_list: list[Any], group: Group | None = None
) -> None:
    """all_to_all (synchronous) whose inputs may be 2-D views with contiguous rows, such
    as column blocks x[:, lo:hi] of a C-contiguous x: the shared-memory path reads them
    straight from their rows, so the caller need not pack them first (the global view's
    S(0) -> S(j) uses it). Not part of the Paddle-shaped API; outputs are contiguous."""
    g = _group(group, "all_to_all")
    ins = list(in_tensor_list)
    if len(ins) != g.nranks or not ins:
        raise ValueError(
            f"all_to_all: in_tensor_list has {len(ins)} arrays, expected one per rank of "
            f"the group ({g.nranks})"
        )
    for i, a in enumerate(ins):
        if not _rows_view(a):
            if hasattr(a, "flags") and not a.flags.c_contiguous:
                raise ValueError(
                    f"all_to_all: in_tensor_list[{i}] (shape {tuple(a.shape)}, strides "
                    f"{tuple(a.strides)}) is neither C-contiguous nor a 2-D array with "
                    f"contiguous rows; pass column blocks x[:, lo:hi] of a C-contiguous 2-D x"
                )
            check_array(a, "all_to_all", f"in_tensor_list[{i}]")
        if tuple(a.shape) != tuple(ins[0].shape) or a.dtype != ins[0].dtype:
            raise ValueError(
                f"all_to_all: in_tensor_list[{i}] has shape {tuple(a.shape)} and dtype "
                f"{a.dtype}, expected shape {tuple(ins[0].shape)} and dtype {ins[0].dtype}"
            )
    outs = check_list(out_tensor_list, g.nranks, "all_to_all", "out_tensor_list")
    _same_kind(outs, ins[0], "all_to_all", "out_tensor_list")
    for i, o in enumerate(outs):
        check_same(o, ins[0], "all_to_all", f"out_tensor_list[{i}]")
    _run(g, "all_to_all", lambda c, d: c.all_to_all(outs, ins, d), True, outs[0])


def _rows_view(a: Any) -> bool:
    """A 2-D array of a supported dtype whose rows are contiguous (any row stride)."""
    return (
        getattr(a, "ndim", 0) == 2
        and np.dtype(a.dtype) in SUPPORTED_DTYPES
        and a.strides[1] == a.dtype.itemsize
        and a.strides[0] >= a.shape[1] * a.dtype.itemsize
    )


def alltoall(
    in_tensor_list: list[Any],
    out_tensor_list: list[Any],
    group: Group | None = None,
    sync_op: bool = True,
) -> Task | None:
    """Paddle's spelling and argument order (inputs first) of all_to_all."""
    return all_to_all(out_tensor_list, in_tensor_list, group, sync_op)


def send(tensor: Any, dst: int = 0, group: Group | None = None, sync_op: bool = True):
    """Send `tensor` to rank `dst`, which calls recv with an array of the same size."""
    g = _group(group, "send")
    check_array(tensor, "send", "tensor")
    peer = _peer(g, dst, "send", "dst")
    if peer == g.rank:
        raise ValueError(f"send: dst={dst} is this rank; a rank cannot send to itself")
    return _run(g, "send", lambda c, d: c.send(tensor, peer, d), sync_op, tensor, g.ranks[peer])


def recv(tensor: Any, src: int = 0, group: Group | None = None, sync_op: bool = True):
    """Receive into `tensor` what rank `src` sends."""
    g = _group(group, "recv")
    check_array(tensor, "recv", "tensor")
    peer = _peer(g, src, "recv", "src")
    if peer == g.rank:
        raise ValueError(f"recv: src={src} is this rank; a rank cannot receive from itself")
    return _run(g, "recv", lambda c, d: c.recv(tensor, peer, d), sync_op, tensor, g.ranks[peer])


def isend(tensor: Any, dst: int, group: Group | None = None) -> Task:
    task = send(tensor, dst, group, sync_op=False)
    assert task is not None
    return task


def irecv(tensor: Any, src: int, group: Group | None = None) -> Task:
    task = recv(tensor, src, group, sync_op=False)
    assert task is not None
    return task


def barrier(group: Group | None = None) -> None:
    """Return once every rank of the group has called barrier."""
    g = _group(group, "barrier")
    _run(g, "barrier", lambda c, d: c.barrier(d), True)


def exit_barrier(group: Group) -> None:
    """The runtime's last barrier before it closes (destroy_process_group): a barrier of its
    own kind on the wire, so a peer still in another collective learns that this rank left
    the job (a PeerExitedError naming it) instead of a protocol mismatch."""
    _run(group, "exit barrier", lambda c, d: c.barrier(d, leaving=True), True)
