"""What the job pipeline needs from the other nodes, one interface for one node and many:
`LocalPeers` (a job whose set of peers is itself) and `StorePeers` (node 0's store or etcd).
"""

from __future__ import annotations

TYPE_CHECKING = False  # typing's, without importing typing
if TYPE_CHECKING:
    from typing import Protocol

    from paddlike.launch.peers.services import ServicesStop
    from paddlike.launch.peers.stackreq import StackChannel
    from paddlike.launch.peers.stopstep import StopStep
    from paddlike.launch.plan.world import NodeEntry, RendezvousResult
    from paddlike.summary import RootCause
else:
    Protocol = object  # interfaces for type checkers; nothing checks them at run time


class RoundWatch(Protocol):
    """One round's link to the job while the supervisor runs it."""

    fd: int | None  # readable when `poll` may have a cause that ends the round; None: never
    services: ServicesStop | None  # who says when the servers stop; None: this node's trainers
    stacks: StackChannel | None  # job-wide stack requests; None on one node
    leaving: bool  # elastic: a signal to this launcher made this node leave the job
    death_notice: bytes | None  # what the guardian tells the store if the launcher dies

    @property
    def root_cause(self) -> RootCause | None:
        """The job's cause as known so far (after `publish`: the winner)."""

    def poll(self) -> RootCause | None:
        """A cause from elsewhere (another node's failure, a lost node) that ends the round."""

    def publish(self, cause: RootCause) -> None:
        """This node's root cause (the supervisor's `on_failure`)."""

    def agree_stop_step(self, position: int, timeout: float) -> StopStep:
        """A preemption notice: this node's ranks' position in, the job's stop step out."""

    def share_stop_outcome(self, part: dict) -> None:
        """A preemption's outcome on this node, for the others (before `Peers.finish`)."""

    def stop_outcomes(self, timeout: float) -> list[dict]:
        """After `Peers.finish`: the other nodes' outcomes (`peers.stopstep`)."""


class Peers(Protocol):
    """The other nodes of the job, for the whole job."""

    address: str  # where they meet, for messages ("" on one node)
    waiting_for: str  # what the launcher waits for now, for the line a signal prints
    # elastic: the last round's members that may come back ((host, pid)); None before
    # a round ended, and always for a fixed job
    survivors: set[tuple[str, int]] | None

    def rendezvous(self, round_: int, entry: NodeEntry) -> RendezvousResult: ...

    def watch(self, round_: int, log_dir: str, *, services: bool) -> RoundWatch: ...

    def finish(self, watch: RoundWatch, ok: bool) -> RootCause | None:
        """This node's round is over (`ok`: its processes succeeded); wait for the others
        and return the job-wide root cause, None when the round succeeded everywhere."""

    def publish_stop(self, cause: RootCause) -> bool:
        """A signal stopped this launcher outside a round: tell the others; False when
        there was no one to tell."""

    def wait_readers(self) -> None: ...

    def end_elastic(self, how: str) -> None:
        """An elastic job ended for all its members (`how`): nodes waiting to join stop."""

    def close(self, linger: bool = True) -> None: ...
