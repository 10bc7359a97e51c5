"""How a round's watch knows that the other nodes are alive: heartbeat counters on node 0's
store (`CounterLiveness`, watched by node 0) or leases on etcd (`LeaseLiveness`, watched by
every node). Both take an injected clock, so that a test moves time instead of sleeping.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Protocol

from paddlike.launch.peers import protocol as p

if TYPE_CHECKING:
    from paddlike.launch.peers.etcd import EtcdStore
    from paddlike.launch.peers.kv import KV


class Liveness(Protocol):
    """How a backend shows that nodes are alive (TCP store counters or etcd leases)."""

    def beat(self) -> None:
        """Say this node is alive; raise StoreError when the backend cannot be reached."""

    def silent(self, now: float) -> list[int]:
        """Nodes whose heartbeats lapsed (only asked on monitoring nodes)."""


class CounterLiveness:
    """TCP store heartbeats: each node bumps ``hb/<i>``; the monitor notes when each changed."""

    def __init__(
        self,
        kv: KV,
        node_index: int,
        nnodes: int,
        timeout: float,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.kv = kv
        self.node_index = node_index
        self.nnodes = nnodes
        self.timeout = timeout
        self.clock = clock
        self._seen: dict[int, tuple[bytes | None, float]] = {}

    def beat(self) -> None:
        self.kv.add(p.heartbeat_key(self.node_index), 1)

    def silent(self, now: float) -> list[int]:
        lost = []
        for j in range(self.nnodes):
            if j == self.node_index:
                continue
            value = self.kv.try_get(p.heartbeat_key(j))
            old = self._seen.get(j)
            if old is None or old[0] != value:
                self._seen[j] = (value, now)
            elif now - old[1] > self.timeout:
                lost.append(j)
        return lost


class LeaseLiveness:
    """etcd heartbeats: `beat` renews this node's lease; a node whose ``alive/<j>`` key
    (attached to its lease) is gone has lost its lease, so it is dead or cut off.

    Elastic jobs renumber nodes each round, so each round has keys of its own
    (``alive/<round>/<j>``, written by each node as its watch starts): a node whose key
    never appears is lost once `timeout` passed since this watch started."""

    def __init__(
        self,
        kv: EtcdStore,
        node_index: int,
        nnodes: int,
        *,
        round_: int | None = None,
        timeout: float = 0.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.kv = kv
        self.node_index = node_index
        self.nnodes = nnodes
        self.round = round_
        self.timeout = timeout
        self.clock = clock
        self._started = clock()
        self._seen: set[int] = set()

    def key(self, node: int) -> str:
        return p.alive_key(node) if self.round is None else p.round_alive_key(self.round, node)

    def beat(self) -> None:
        self.kv.keepalive()

    def silent(self, now: float) -> list[int]:
        lost = []
        for j in range(self.nnodes):
            if j == self.node_index:
                continue
            if self.kv.try_get(self.key(j)) is not None:
                self._seen.add(j)
            elif self.round is None or j in self._seen or now - self._started > self.timeout:
                lost.append(j)
        return lost
