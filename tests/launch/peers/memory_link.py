"""A `peers.links.Link` over one in-memory store (`MemoryKV`), for the peers' tests: every
connection is the same store, node 0 monitors the heartbeats, time is an injected clock."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from paddlike.launch.peers.liveness import CounterLiveness
from paddlike.launch.peers.watch import JobWatch, WatchSpec, WatchTransport
from paddlike.launch.plan.world import NodeEntry
from tests.support.fakes import MemoryKV, StepClock


class MemoryLink:
    server = None  # nobody hosts a store of their own

    def __init__(
        self,
        kv: MemoryKV,
        *,
        keeps_keys: bool = False,
        heartbeat_timeout: float = 10.0,
        clock: Callable[[], float] | None = None,
    ) -> None:
        self.kv = kv
        self.keeps_keys = keeps_keys
        self.heartbeat_timeout = heartbeat_timeout
        self.clock = clock or StepClock()

    def connect(self) -> MemoryKV:
        return self.kv

    def transport(self, spec: WatchSpec, **fields: object) -> WatchTransport:
        """`fields`: the transport's own (hosts_store, monitor, ...), where a test sets them."""
        liveness = CounterLiveness(
            self.kv, spec.node_index, len(spec.hosts), self.heartbeat_timeout, clock=self.clock
        )
        made = WatchTransport(
            kv=self.kv,
            connect=self.connect,
            liveness=liveness,
            heartbeat_timeout=self.heartbeat_timeout,
            monitor=spec.node_index == 0,
            clock=self.clock,
        )
        return made._replace(**fields)

    def rival(
        self, entry: NodeEntry, round_: int, hosts: Sequence[str], missing: list[int]
    ) -> str | None:
        return None

    def close(self) -> None:
        pass


def memory_watch(
    kv: MemoryKV,
    spec: WatchSpec,
    *,
    heartbeat_timeout: float = 10.0,
    clock: Callable[[], float] | None = None,
    **fields: object,
) -> JobWatch:
    """A round's watch on `kv` (not started); `fields` as in `MemoryLink.transport`."""
    clock = clock or StepClock()
    link = MemoryLink(kv, heartbeat_timeout=heartbeat_timeout, clock=clock)
    return JobWatch(spec, link.transport(spec, **fields))
