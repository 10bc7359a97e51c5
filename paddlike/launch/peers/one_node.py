"""The peers of a one-node job: itself. The rendezvous is immediate, nothing is watched,
and the job-wide root cause is this node's own."""

from __future__ import annotations

from paddlike.launch.peers.services import ServicesStop
from paddlike.launch.peers.stopstep import StopStep
from paddlike.launch.plan.world import NodeEntry, RendezvousResult
from paddlike.summary import RootCause


class LocalWatch:
    """One node's round watch: nothing to watch; a published cause is only noted."""

    def __init__(self) -> None:
        self.fd: int | None = None
        self.services: ServicesStop | None = None
        self.cause: RootCause | None = None
        self.stacks = None  # no other node to ask for stacks
        self.leaving = False  # (a one-node job is never elastic)
        self.death_notice: bytes | None = None  # nobody to tell

    @property
    def root_cause(self) -> RootCause | None:
        return self.cause

    def poll(self) -> RootCause | None:
        return None

    def agree_stop_step(self, position: int, timeout: float) -> StopStep:
        return StopStep(position)  # its ranks are all the job's

    def share_stop_outcome(self, part: dict) -> None:
        pass  # nobody else to tell

    def stop_outcomes(self, timeout: float) -> list[dict]:
        return []

    def publish(self, cause: RootCause) -> None:
        if self.cause is None:
            self.cause = cause


class LocalPeers:
    address = ""
    waiting_for = "starting"
    survivors = None  # (a one-node job is never elastic)

    def rendezvous(self, round_: int, entry: NodeEntry) -> RendezvousResult:
        self.waiting_for = f"running round {round_}"  # placed: as many nodes' say it from here
        return RendezvousResult(round_, (entry,), entry.job_id, 0.0)

    def watch(self, round_: int, log_dir: str, *, services: bool) -> LocalWatch:
        self.waiting_for = f"running round {round_}"
        return LocalWatch()

    def finish(self, watch: LocalWatch, ok: bool) -> RootCause | None:
        return None if ok else watch.cause

    def publish_stop(self, cause: RootCause) -> bool:
        return False

    def wait_readers(self) -> None:
        pass

    def end_elastic(self, how: str) -> None:
        pass

    def close(self, linger: bool = True) -> None:
        pass
