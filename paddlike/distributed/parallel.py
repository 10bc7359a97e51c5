"""Setting up and tearing down the runtime (init_parallel_env, new_group,
destroy_process_group); data parallelism on top of it is data_parallel.py.

Rank 0 hosts the runtime store at PADDLE_MASTER (the launcher reserved that port on
rank 0's host); every rank connects to it, and each group's communicator exchanges its
addresses there. A world of one needs neither.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import socket
import time
from collections.abc import Iterable, Sequence
from typing import Any

from paddlike import contract as C
from paddlike import netaddr

from .collective import keys as K
from .collective import ops
from .collective.device import AUTO_REFUSAL
from .collective.errors import CollectiveError
from .collective.group import DEVICE, HOST, Group, Lane, runtime
from .collective.task import OpQueue

# Paddle's path (paddle.distributed.parallel.DataParallel) and this module's before the
# split: both keep working
from .data_parallel import DataParallel, all_reduce_gradients  # noqa: F401
from .env import ParallelEnv, master_address

__all__ = [
    "destroy_process_group",
    "get_backend",
    "get_group",
    "init_parallel_env",
    "is_initialized",
    "new_group",
]

DEFAULT_TIMEOUT = 300.0
DESTROY_TIMEOUT = 30.0  # at most this long for the last barrier and the store's shutdown
BACKENDS = ("auto", "cpu", "gloo", "tcp", "nccl")


# init_parallel_env's arguments, once it formed the default group
formed_with: tuple[str, float | None] | None = None


def is_initialized() -> bool:
    return runtime.default is not None


def _timeout(timeout: float | None) -> float:
    if timeout is not None:
        value = float(getattr(timeout, "total_seconds", lambda: timeout)())
    else:
        raw = os.environ.get(C.TIMEOUT, "").strip()
        try:
            value = float(raw) if raw else DEFAULT_TIMEOUT
        except ValueError:
            raise ValueError(f"environment variable {C.TIMEOUT}={raw!r} is not seconds") from None
    if value <= 0:
        raise ValueError(f"init_parallel_env: timeout={value} must be positive seconds")
    return value


def _choose_backend(backend: str, device_id: int) -> tuple[str, frozenset[str], dict[str, str]]:
    """(the name get_backend() reports, the kinds of arrays served, why a kind is not).

    "auto": host arrays through the CPU backend, and device arrays through NCCL where
    NCCL can run here (torch's cpu:gloo,cuda:nccl); "cpu" or "nccl" force one kind."""
    from .collective import nccl

    name = (backend or "auto").strip().lower()
    if name not in BACKENDS:
        raise ValueError(f"init_parallel_env: backend={backend!r} is not one of {BACKENDS}")
    if name == "nccl":
        why = nccl.unusable_reason(device_id)
        if why is not None:
            raise CollectiveError(
                f"init_parallel_env: backend='nccl' needs CuPy with NCCL and a visible GPU "
                f"{device_id} (FLAGS_selected_gpus, else LOCAL_RANK): {why}; "
                f"{'' if 'paddlike[gpu]' in why else 'install paddlike[gpu] or '}use "
                f"backend='cpu'"
            )
        return "nccl", frozenset({DEVICE}), {HOST: "only NCCL (backend='nccl'); pass cupy "
                                            "arrays, or init_parallel_env(backend='auto') "
                                            "for both kinds"}  # fmt: skip
    forced = f"only the CPU backend (backend={name!r}); use init_parallel_env(backend='auto')"
    if name != "auto":
        return "cpu", frozenset({HOST}), {DEVICE: forced + " on a GPU node for cupy arrays"}
    why = nccl.unusable_reason(device_id)
    if why is None:
        return "nccl", frozenset({HOST, DEVICE}), {}
    return "cpu", frozenset({HOST}), {DEVICE: AUTO_REFUSAL + why}


def _host_comm(ranks: Sequence[int], group_rank: int, prefix: str, timeout: float) -> Any:
    from .collective.cpu import CpuCommunicator

    return CpuCommunicator(runtime.store, prefix, group_rank, ranks, runtime.host, timeout)


def _device_comm(ranks: Sequence[int], group_rank: int, prefix: str, timeout: float,
                 host: Lane | None = None) -> Any:  # fmt: skip
    """The group's NCCL communicator; its setup waits watch the host lane's connections, so
    a peer that exited is named at once."""
    from .collective.nccl import NcclCommunicator

    def exited(k: int) -> bool:
        mesh = getattr(host.comm if host is not None else None, "mesh", None)
        return mesh is not None and mesh.peer_closed(k)

    return NcclCommunicator(runtime.store, prefix, group_rank, ranks, runtime.device_id,
                            timeout, exited if host is not None else None)  # fmt: skip


def make_group(gid: int, ranks: list[int], prefix: str, timeout: float, name: str) -> Group:
    """A group of `ranks` whose keys in the store live under `prefix`: a lane per kind of
    array this job serves. The host communicator is made now (every rank of the group is
    here, in the same order); the device one when the first device array arrives, unless
    NCCL was asked for by name (made now, so that a failure shows at init)."""
    rank = ranks.index(runtime.rank) if runtime.rank in ranks else -1
    group = Group(gid, ranks, rank, runtime.backend, timeout)
    group.refusals = dict(runtime.refusals)
    if rank < 0:
        return group
    host = None
    if HOST in runtime.kinds:
        host = Lane(HOST, OpQueue(name))
        host.comm = _host_comm(ranks, rank, prefix, timeout)
        group.lanes[HOST] = host
    if DEVICE in runtime.kinds:
        from .collective import nccl

        if runtime.device_queue is None:
            runtime.device_queue = OpQueue("device")
        device_id = runtime.device_id
        device = Lane(DEVICE, runtime.device_queue,
                      make=lambda: _device_comm(ranks, rank, prefix, timeout, host),
                      context=lambda: nccl.caller_context(device_id))  # fmt: skip
        if HOST not in runtime.kinds:
            device.communicator()
        group.lanes[DEVICE] = device
    return group


def _build_group(gid: int, ranks: list[int], timeout: float) -> Group:
    group = make_group(gid, ranks, K.group(runtime.prefix, gid), timeout, f"g{gid}")
    runtime.groups[gid] = group
    return group


def init_parallel_env(backend: str = "auto", timeout: float | None = None) -> Group:
    """Join the job described by the launcher's environment; returns the default group.

    `timeout` (seconds, default PADDLIKE_TIMEOUT or 300) bounds the setup and is every
    operation's deadline. Calling it again returns the existing group.
    """
    from paddlike.distributed import nodelist

    nodelist.start_if_configured()  # the node-list form: this node's launcher, or a worker
    with runtime.lock:
        if runtime.default is not None:
            return runtime.default
        env = ParallelEnv()
        seconds = _timeout(timeout)
        runtime.backend, runtime.kinds, runtime.refusals = _choose_backend(
            backend, env.device_id
        )
        runtime.rank, runtime.world_size = env.rank, env.world_size
        runtime.device_id, runtime.timeout = env.device_id, seconds
        # The incarnation (how many times this process tore the runtime down) keeps the keys
        # of a re-initialized runtime apart from the previous one's; every rank counts alike.
        restart = os.environ.get(C.RESTART_COUNT, "0")
        runtime.prefix = K.runtime(restart, runtime.incarnation)
        runtime.host = _own_host(env)
        if env.world_size > 1 or DEVICE in runtime.kinds:
            _connect_store(env, seconds)
        try:
            if (backend or "auto").strip().lower() == "auto":
                from .collective.device import settle

                settle(env.rank, env.world_size, env.device_id, seconds)
            runtime.default = _build_group(0, list(range(env.world_size)), seconds)
        except BaseException:
            _close_store()
            raise
        _watch_uncaught_exceptions()
        atexit.register(_destroy_at_exit)  # a script that forgets still leaves cleanly
        global formed_with
        formed_with = (backend, timeout)  # `restartable` forms the next round's alike
        return runtime.default


def _own_host(env: ParallelEnv) -> str:
    """The address peers reach this worker at: its endpoint's host (the launcher's contract);
    for torchrun-style environments without one, the local address of the route to the
    master (a UDP connect sends nothing), or loopback in a world of one."""
    if env.current_endpoint:
        return netaddr.split(env.current_endpoint)[0]
    master = master_address()
    if master is None:
        return "127.0.0.1"
    try:
        family, _, _, _, sockaddr = socket.getaddrinfo(*master, type=socket.SOCK_DGRAM)[0]
        with socket.socket(family, socket.SOCK_DGRAM) as probe:  # IPv6 for an IPv6 master
            probe.connect(sockaddr)
            return str(probe.getsockname()[0])
    except OSError:
        return "127.0.0.1"


def _connect_store(env: ParallelEnv, timeout: float) -> None:
    from .store import StoreClient, StoreServer

    master = master_address()
    if master is None and env.world_size == 1:
        # A world of one outside a launch (a script on a GPU laptop): NCCL's unique id
        # still travels through a store, so host a private one on loopback.
        runtime.server = StoreServer("127.0.0.1", 0).start()
        master = runtime.server.address
    if master is None:
        raise CollectiveError(
            f"init_parallel_env: world size is {env.world_size} but neither {C.PADDLE_MASTER} "
            f"nor {C.MASTER_ADDR}/{C.MASTER_PORT} is set; start the script with "
            f"python -m paddlike.launch"
        )
    host, port = master
    token_raw = os.environ.get(C.JOB_TOKEN, "")
    token = token_raw.encode() if token_raw else None
    hosts_raw = os.environ.get(C.NODE_HOSTS, "")
    allowed = [h.strip() for h in hosts_raw.split(",") if h.strip()] or None
    if env.rank == 0 and runtime.server is None:
        try:
            runtime.server = StoreServer(host, port, allowed_hosts=allowed, token=token).start()
        except OSError as exc:
            raise CollectiveError(
                f"init_parallel_env: rank 0 could not host the runtime store at "
                f"{netaddr.join(host, port)} ({C.PADDLE_MASTER}): {exc}"
            ) from None
    deadline = time.monotonic() + timeout
    try:
        runtime.store = StoreClient(host, port, timeout=timeout, token=token)
        _await_current_store(env.rank, deadline)
    except Exception as exc:
        _close_store()
        raise CollectiveError(
            f"init_parallel_env: rank {env.rank} could not reach rank 0's store at "
            f"{netaddr.join(host, port)} within {timeout:g} s: {exc}"
        ) from None


def _await_current_store(rank: int, deadline: float) -> None:
    """Make sure this client talks to the store of this incarnation, not the previous one.

    A rank that calls init_parallel_env right after destroy_process_group can reach rank 0's
    previous store in its last moments. Rank 0 marks its new store with this incarnation's
    key; in an old store that key never appears, the wait ends when rank 0 closes it (or
    the connection drops), and the client reconnects — to the new store — on its next call.
    """
    from .store import StoreAuthError, StoreError

    store = runtime.store
    key = K.store_ready(runtime.prefix)
    if rank == 0:
        store.set(key, b"1")
        return
    while True:
        try:
            store.get(key, timeout=max(0.001, deadline - time.monotonic()))
            return
        except StoreAuthError:
            raise
        except StoreError:
            if time.monotonic() >= deadline:
                raise


def _close_store() -> None:
    if runtime.store is not None:
        with contextlib.suppress(Exception):
            runtime.store.close()
    if runtime.server is not None:
        with contextlib.suppress(Exception):
            runtime.server.close()
    runtime.store = runtime.server = None


def new_group(ranks: Iterable[int] | None = None, backend: str | None = None,
              timeout: float | None = None) -> Group:  # fmt: skip
    """A group of the given global ranks. Every rank of the world calls it, in the same
    order; ranks outside the group get a Group they cannot use (a clear error if they do)."""
    with runtime.lock:
        if runtime.default is None:
            raise CollectiveError("new_group: call init_parallel_env() first")
        members = sorted({int(r) for r in (range(runtime.world_size) if ranks is None else ranks)})
        bad = [r for r in members if not 0 <= r < runtime.world_size]
        if bad or not members:
            raise ValueError(
                f"new_group: ranks {list(ranks or [])} must be a non-empty list of ranks in "
                f"0..{runtime.world_size - 1}"
            )
        gid = runtime.next_group_id
        runtime.next_group_id += 1
        seconds = runtime.timeout if timeout is None else _timeout(timeout)
        return _build_group(gid, members, seconds)


def get_group(gid: int = 0) -> Group | None:
    return runtime.groups.get(gid)


def get_backend(group: Group | None = None) -> str:
    g = group or runtime.default
    return g.backend if g is not None else runtime.backend


_uncaught: list[BaseException] = []
_started = time.time()  # an error file older than this is an earlier run's


def _watch_uncaught_exceptions() -> None:
    """Remember an uncaught exception (sys.excepthook runs before atexit), chaining to the
    hook already installed."""
    import sys

    from . import errorfile, leaving

    leaving.install()  # sys.exit notes its status: a non-zero one skips the exit barrier
    previous = sys.excepthook
    if getattr(previous, "_paddlike_watch", False):
        return

    def hook(kind: type[BaseException], exc: BaseException, tb: Any) -> None:
        _uncaught.append(exc)
        with contextlib.suppress(Exception):  # said before atexit closes any connection
            errorfile.write(kind, exc, tb, _started)
        previous(kind, exc, tb)

    hook._paddlike_watch = True  # type: ignore[attr-defined]
    sys.excepthook = hook


def _destroy_at_exit() -> None:
    """At exit: a clean leave (the exit barrier) after a normal end or sys.exit(0); after an
    uncaught exception or sys.exit with another status, no collective at all: the other
    ranks must see this rank's exit at once, as the job's cause, not a barrier it never
    meant (they may be in a collective it will never enter)."""
    from . import errorfile, leaving

    left = leaving.left_with()
    if left is not None and left[0] != 0 and not _uncaught:
        with contextlib.suppress(Exception):  # said before any connection closes
            errorfile.write_exit(left[0], left[1], _started)
    if _uncaught or (left is not None and left[0] != 0):
        with runtime.lock:
            _close_quietly(clean=False)
            runtime.incarnation += 1
        return
    destroy_process_group()


def destroy_process_group(group: Group | None = None) -> None:
    """Close `group`, or everything (after a last barrier, so rank 0's store outlives use)."""
    with runtime.lock:
        if group is not None and group is not runtime.default:
            group.close()
            runtime.groups.pop(group.id, None)
            return
        default = runtime.default
        if default is None:
            return
        if default.is_member() and default.broken is None and default.nranks > 1:
            seconds = min(default.timeout, DESTROY_TIMEOUT)
            deadline = time.monotonic() + seconds
            try:
                default.timeout = seconds
                ops.exit_barrier(default)
            except Exception:
                pass  # a peer is gone: nobody is left to wait for
            else:
                _leave_store(deadline)
        _close_quietly()
        runtime.incarnation += 1


def abandon() -> None:
    """Close every group and the store at once, without the last barrier: a peer is gone
    (`restartable` parks this process for the next round)."""
    with runtime.lock:
        _close_quietly(clean=False)
        runtime.incarnation += 1


def _leave_store(deadline: float) -> None:
    """Two-phase shutdown of rank 0's store: every rank says it is leaving; rank 0 closes
    its store once all have (or at the deadline); the others return only when it has
    closed, so none of them can reach the old store when it initializes again."""
    from .store import StoreError

    store = runtime.store
    if store is None:
        return
    with contextlib.suppress(StoreError):
        if store.add(K.leaving(runtime.prefix, "count"), 1) == runtime.world_size:
            store.set(K.leaving(runtime.prefix, "all"), b"1")
        left = max(0.001, deadline - time.monotonic())
        if runtime.server is not None:
            store.wait([K.leaving(runtime.prefix, "all")], timeout=left)
        else:
            # Never set: the wait ends when rank 0 closes its store (its listening socket
            # is closed by then) or when the connection drops.
            store.wait([K.leaving(runtime.prefix, "store-closed")], timeout=left)


def _close_quietly(clean: bool = True) -> None:
    for g in list(runtime.groups.values()):
        g.close(clean)
    runtime.groups.clear()
    if runtime.device_queue is not None:
        runtime.device_queue.close()
        runtime.device_queue = None
    runtime.default = None
    runtime.next_group_id = 1
    _close_store()
