"""Groups of ranks, and the process-wide runtime state (store, default group) they hang off.

A group is what every operation accepts: its global ranks (sorted), this process's rank
in it, and — for members — one lane per kind of array it serves: host arrays (numpy)
through the CPU backend, device arrays (cupy) through NCCL, each lane with its
communicator (made when first needed) and operation queue. Device lanes of every group
share one queue, so NCCL work reaches the GPU in the order it was issued, whatever the
group (NCCL needs one order on every rank). Ranks outside a group hold a Group too (every
rank calls `new_group`), so using it gives a clear error instead of a hang.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from .backend import Communicator
from .errors import CollectiveError, GroupMembershipError
from .task import OpQueue

__all__ = ["DEVICE", "HOST", "Group", "Lane", "Runtime", "array_kind", "runtime"]

HOST, DEVICE = "host", "device"
KIND_WORDS = {HOST: "a host array (numpy)", DEVICE: "a device array (cupy)"}


_KINDS: dict[type, str] = {}  # array type -> its kind: one dict read per call


def array_kind(x: Any) -> str:
    """DEVICE for cupy arrays, HOST for anything else (numpy)."""
    kind = _KINDS.get(type(x))
    if kind is None:
        kind = DEVICE if type(x).__module__.startswith("cupy") else HOST
        if len(_KINDS) < 64:  # array types are few; never grow without bound
            _KINDS[type(x)] = kind
    return kind


@dataclass(eq=False)
class Lane:
    """One kind of array's path through a group: its communicator (built by `make` when
    first needed, in queue order, so every rank builds it at the same point), its queue,
    what the caller's thread hands to the queue (`context`), and the error that broke it."""

    kind: str
    queue: OpQueue
    make: Callable[[], Communicator] | None = None
    context: Callable[[], contextlib.AbstractContextManager[None]] = contextlib.nullcontext
    comm: Communicator | None = None
    broken: BaseException | None = field(default=None, repr=False)

    def communicator(self) -> Communicator:
        if self.comm is None:
            if self.make is None:
                raise CollectiveError("the communicator was closed")
            self.comm, self.make = self.make(), None
        return self.comm


@dataclass(eq=False)
class Group:
    """A set of global ranks that run collectives together (Paddle's `Group`)."""

    id: int
    ranks: list[int]
    rank: int  # this process's rank in the group; -1 when not a member
    backend: str
    timeout: float
    lanes: dict[str, Lane] = field(default_factory=dict)
    refusals: dict[str, str] = field(default_factory=dict, repr=False)  # kind -> why not
    closed: bool = False

    @property
    def nranks(self) -> int:
        return len(self.ranks)

    world_size = nranks

    @property
    def comm(self) -> Communicator | None:
        """The communicator of the first lane (host before device), once built."""
        for lane in self.lanes.values():
            if lane.comm is not None:
                return lane.comm
        return None

    @property
    def broken(self) -> BaseException | None:
        for lane in self.lanes.values():
            if lane.broken is not None:
                return lane.broken
        return None

    def is_member(self) -> bool:
        return self.rank >= 0

    def get_group_rank(self, global_rank: int) -> int:
        """The group rank of `global_rank`, or -1 when it is not in this group."""
        try:
            return self.ranks.index(int(global_rank))
        except ValueError:
            return -1

    def require_member(self, what: str) -> None:
        if not self.is_member():
            raise GroupMembershipError(
                f"{what}: this rank is not a member of group {self.id} (ranks {self.ranks}); "
                f"only those ranks may use it — check new_group(ranks) and the `group=` "
                f"argument"
            )
        if self.closed:
            raise CollectiveError(f"{what}: group {self.id} was destroyed")

    def lane(self, kind: str, what: str, arg: str = "tensor") -> Lane:
        """The lane for arrays of `kind`; refused (the group stays usable) when this job
        has none: one line naming the array's kind and the backend."""
        lane = self.lanes.get(kind)
        if lane is None:
            self.require_member(what)
            raise TypeError(
                f"{what}: {arg} is {KIND_WORDS[kind]}, but group {self.id} runs "
                f"{self.refusals.get(kind, 'no backend for it')}"
            )
        return lane

    def default_lane(self, what: str) -> Lane:
        """The lane of an operation without arrays (barrier): host if there is one."""
        self.require_member(what)
        return self.lanes.get(HOST) or self.lane(DEVICE, what)

    def close(self, clean: bool = True) -> None:
        """Release the lanes: a clean teardown lets NCCL finish what is in flight
        (destroy); after an error, abort without waiting for peers."""
        for lane in self.lanes.values():
            if lane.kind == HOST:
                lane.queue.close()  # device lanes share the runtime's queue
            comm, lane.comm, lane.make = lane.comm, None, None
            if comm is not None:
                with contextlib.suppress(Exception):
                    if clean and lane.broken is None:
                        comm.close()
                    else:
                        comm.abort()
        self.closed = True

    def __repr__(self) -> str:
        return (
            f"Group(id={self.id}, ranks={self.ranks}, rank={self.rank}, backend={self.backend!r})"
        )


@dataclass
class Runtime:
    """What init_parallel_env set up; one per process."""

    lock: threading.RLock = field(default_factory=threading.RLock)
    default: Group | None = None
    groups: dict[int, Group] = field(default_factory=dict)
    next_group_id: int = 1
    store: Any = None  # StoreClient, None in a world of one
    server: Any = None  # StoreServer on rank 0
    host: str = "127.0.0.1"
    prefix: str = "paddlike"
    backend: str = "cpu"  # what get_backend() says: "cpu" or "nccl"
    kinds: frozenset[str] = frozenset({HOST})  # the kinds of arrays this job's groups serve
    refusals: dict[str, str] = field(default_factory=dict)  # kind -> why this job has none
    device_queue: OpQueue | None = None  # every group's NCCL work, in issue order
    timeout: float = 300.0
    rank: int = 0
    world_size: int = 1
    device_id: int = 0
    incarnation: int = 0  # times the runtime was torn down in this process (store keys differ)


runtime = Runtime()
