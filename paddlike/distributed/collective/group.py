"""Groups of ranks, and the process-wide runtime state (store, default group) they hang off.

A group is what every operation accepts: its global ranks (sorted), this process's rank
in it, and — for members — the communicator and its operation queue. Ranks outside a
group hold a Group too (every rank calls `new_group`), so using it gives a clear error
instead of a hang.
"""

from __future__ import annotations

import contextlib
import threading
from dataclasses import dataclass, field
from typing import Any

from .backend import Communicator
from .errors import CollectiveError, GroupMembershipError
from .task import OpQueue

__all__ = ["Group", "Runtime", "runtime"]


@dataclass(eq=False)
class Group:
    """A set of global ranks that run collectives together (Paddle's `Group`)."""

    id: int
    ranks: list[int]
    rank: int  # this process's rank in the group; -1 when not a member
    backend: str
    timeout: float
    comm: Communicator | None = None
    queue: OpQueue | None = None
    broken: BaseException | None = field(default=None, repr=False)

    @property
    def nranks(self) -> int:
        return len(self.ranks)

    world_size = nranks

    def is_member(self) -> bool:
        return self.rank >= 0

    def get_group_rank(self, global_rank: int) -> int:
        """The group rank of `global_rank`, or -1 when it is not in this group."""
        try:
            return self.ranks.index(int(global_rank))
        except ValueError:
            return -1

    def require_member(self, what: str) -> Communicator:
        if self.comm is None or self.queue is None:
            if not self.is_member():
                raise GroupMembershipError(
                    f"{what}: this rank is not a member of group {self.id} (ranks {self.ranks}); "
                    f"only those ranks may use it — check new_group(ranks) and the `group=` "
                    f"argument"
                )
            raise CollectiveError(f"{what}: group {self.id} was destroyed")
        return self.comm

    def close(self) -> None:
        if self.queue is not None:
            self.queue.close()
        if self.comm is not None:
            with contextlib.suppress(Exception):
                self.comm.close()
        self.comm, self.queue = None, None

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
    backend: str = "cpu"
    timeout: float = 300.0
    rank: int = 0
    world_size: int = 1
    device_id: int = 0
    incarnation: int = 0  # times the runtime was torn down in this process (store keys differ)


runtime = Runtime()
