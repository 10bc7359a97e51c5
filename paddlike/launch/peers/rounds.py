"""How a many-node job's rounds differ, as two strategies `session.StorePeers` runs:

| step                     | `FixedRounds`                  | `ElasticRounds`                   |
| ------------------------ | ------------------------------ | --------------------------------- |
| the rendezvous           | every node of --ips; round 0   | whoever comes; the previous       |
|                          | may assign the ranks           | round's ranks kept in order       |
| the round's end          | the watch's cause              | a lost or leaving node makes it a |
|                          |                                | membership change; survivors noted|
| a signal between rounds  | the job ends                   | this node leaves the job          |
| the job ends             | nothing more                   | nodes waiting to join are told    |

Each strategy decides (which rendezvous, which cause); the session carries it out.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence

from paddlike.distributed.store import StoreError
from paddlike.launch.peers import protocol as p
from paddlike.launch.peers.elastic_rendezvous import ElasticRendezvous
from paddlike.launch.peers.kv import Progress
from paddlike.launch.peers.rendezvous import Rendezvous
from paddlike.launch.peers.rendezvous_errors import RendezvousError
from paddlike.launch.peers.watch import STORE_HOST_ENDS
from paddlike.launch.plan.membership import LEFT, LOST, ElasticSpec
from paddlike.launch.plan.policy import membership_cause
from paddlike.launch.plan.world import NodeEntry, RendezvousResult
from paddlike.summary import RootCause

TYPE_CHECKING = False  # typing's, without importing typing
if TYPE_CHECKING:
    from paddlike.launch.peers.links import Link
    from paddlike.launch.peers.watch import JobWatch


class FixedRounds:
    """A fixed job: every round has every node; round 0 may assign the ranks."""

    elastic: ElasticSpec | None = None
    survivors: set[tuple[str, int]] | None = None  # (only elastic rounds have survivors)
    stop_aborts_rendezvous = True  # a signal during a rendezvous aborts it for every node
    nodes_may_wait = False  # no node waits to join (nobody to tell that the job ended)

    def __init__(
        self,
        link: Link,
        *,
        timeout: float,
        progress: Progress,
        assign: bool,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.link = link
        self.clock = clock
        self.timeout = timeout
        self.progress = progress
        self.assign = assign  # round 0 assigns the node ranks (the same command everywhere)

    def rendezvous(
        self, round_: int, entry: NodeEntry, hosts: Sequence[str], node_index: int
    ) -> tuple[Rendezvous, NodeEntry]:
        """Round `round_`'s rendezvous and the entry this node brings to it."""
        link = self.link

        def rival_check(round_: int, missing: list[int]) -> str | None:
            return link.rival(entry, round_, hosts, missing)

        assign = self.assign and round_ == 0  # later rounds keep the ranks round 0 gave
        if assign and link.server is not None and entry.index < 0:
            entry = entry._replace(index=0)  # the node hosting the launchers' store is node 0
        rdzv = Rendezvous(
            kv=link.kv,
            node_index=node_index,
            nnodes=len(hosts),
            hosts=hosts,
            timeout=self.timeout,
            progress=self.progress,
            rival_check=rival_check,
            assign=assign,
            clock=self.clock,
        )
        return rdzv, entry

    def joined(self, result: RendezvousResult) -> None:
        pass

    def round_cause(
        self, watch: JobWatch, cause: RootCause | None, hosts: Sequence[str], timeout: float
    ) -> RootCause | None:
        return cause

    def stop_cause(self, cause: RootCause) -> RootCause:
        """A signal stopped this launcher between rounds: the job ends."""
        return cause

    def waiting_round(self) -> int | None:
        """The round nodes waiting to join wait in, to tell them the job ended: none."""
        return None


class ElasticRounds:
    """An elastic job (--nnodes MIN:MAX): each round's members are whoever came."""

    stop_aborts_rendezvous = False  # a signal during a rendezvous: this node leaves alone
    nodes_may_wait = True  # nodes waiting to join are told when the job ends

    def __init__(
        self,
        link: Link,
        spec: ElasticSpec,
        *,
        timeout: float,
        progress: Progress,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.link = link
        self.clock = clock
        self.elastic: ElasticSpec | None = spec
        self.spec = spec
        self.timeout = timeout
        self.progress = progress
        self.world: tuple[NodeEntry, ...] = ()  # the last round's members
        # (host, pid) of the last round's members that may come back; None before a
        # round ended
        self.survivors: set[tuple[str, int]] | None = None
        self._after = ""  # why the next round is held below MIN, for its timeout
        self.ended_round: int | None = None  # the last round this node finished

    def rendezvous(
        self, round_: int, entry: NodeEntry, hosts: Sequence[str], node_index: int
    ) -> tuple[ElasticRendezvous, NodeEntry]:
        """The store's host asks for rank 0 (it stays rank 0, and its heartbeat monitor
        with it); the others for their previous rank (kept in order), newcomers for none."""
        if self.link.server is not None:
            entry = entry._replace(index=0)
        elif not any(e.pid == entry.pid and e.host == entry.host for e in self.world):
            entry = entry._replace(index=-1)
        if self.ended_round is not None:
            # this member goes on: the round it ran is over, and the next may close. (Only
            # now, never when the round ends: nodes waiting for a place must not start a
            # round of their own while the job ends; they read `end_elastic`'s word.)
            try:
                self.link.kv.set(p.over_key(self.ended_round), b"1")
            except StoreError as exc:
                raise RendezvousError(
                    f"rendezvous: lost the launchers' store at {self.link.kv.address} before "
                    f"round {round_} ({exc})"
                ) from exc
        holding = self.survivors is not None and len(self.survivors) < self.spec.min_nodes
        rdzv = ElasticRendezvous(
            self.link.kv,
            self.spec,
            timeout=self.spec.hold if holding else self.timeout,
            progress=self.progress,
            survivors=self.survivors,
            after=self._after if holding else "",
            clock=self.clock,
        )
        return rdzv, entry

    def joined(self, result: RendezvousResult) -> None:
        self.world = result.nodes

    def round_cause(
        self, watch: JobWatch, cause: RootCause | None, hosts: Sequence[str], timeout: float
    ) -> RootCause | None:
        """A round in which a node was lost or left ends as a membership change; the
        members that may come back are the next round's survivors."""
        gone = (p.END_LOST, p.END_LEFT, p.STOPPED, b"")
        self.survivors = {
            (e.host, e.pid) for j, e in enumerate(self.world) if watch.ends.get(j, b"") not in gone
        }
        went = [
            (j, LOST if mark == p.END_LOST else LEFT)
            for j, mark in sorted(watch.ends.items())
            if mark in gone
        ]
        if went and not watch.leaving:
            cause = membership_cause(cause, went, hosts, timeout, time.time())
        self._after = f"after {cause.reason}" if cause is not None else ""
        self.ended_round = watch.round
        return cause

    def left_out(self, round_: int, survivors: set[tuple[str, int]], why: str) -> None:
        """Round `round_` ended before it started: the pre-flight check (issue 35) left some
        of its members out; the next round closes once `survivors` came."""
        self.survivors, self.ended_round, self._after = survivors, round_, f"after {why}"

    def stop_cause(self, cause: RootCause) -> RootCause:
        """A signal stopped this launcher between rounds: this node leaves the job, unless
        it hosts the launchers' store (the job cannot go on without it: it ends)."""
        if self.link.server is not None:
            return cause.replace(reason=cause.reason + STORE_HOST_ENDS)
        return cause.replace(membership=LEFT)

    def waiting_round(self) -> int | None:
        """The round after the last one this node ran (None before it ran one)."""
        return None if self.ended_round is None else self.ended_round + 1


def rounds_for(
    link: Link,
    spec: ElasticSpec | None,
    *,
    timeout: float,
    progress: Progress,
    assign: bool,
    clock: Callable[[], float] = time.monotonic,
) -> FixedRounds | ElasticRounds:
    """The strategy for a fixed job (`spec` None) or an elastic one."""
    if spec is None:
        return FixedRounds(link, timeout=timeout, progress=progress, assign=assign, clock=clock)
    return ElasticRounds(link, spec, timeout=timeout, progress=progress, clock=clock)
