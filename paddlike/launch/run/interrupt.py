"""A launcher stopped by a signal outside a supervised round (connecting, at the
rendezvous, waiting for the others): what it was doing (`Where`), the one line it
prints, and the other nodes told (`Peers.publish_stop`).
"""

from __future__ import annotations

import contextlib
import time

from paddlike.launch.console.output import Console
from paddlike.launch.peers.api import Peers
from paddlike.launch.plan.nodejob import NodeJob
from paddlike.launch.plan.policy import launcher_signal_cause
from paddlike.launch.run.signals import LauncherSignal


class Where:
    """What the launcher is doing, for the line a signal prints."""

    def __init__(self) -> None:
        self.waiting = "starting"
        self.peers: Peers | None = None
        self.job: NodeJob | None = None  # once a rendezvous placed it (its rank assigned)

    @property
    def what(self) -> str:
        return self.peers.waiting_for if self.peers is not None else self.waiting


def stopped_by_signal(sig: LauncherSignal, where: Where, job: NodeJob, console: Console) -> int:
    """One line, the other nodes told (when connected), exit 128+N."""
    what = where.what
    peers = where.peers
    job = where.job or job
    told = False
    if peers is not None:
        cause = launcher_signal_cause(job.host, job.index, sig.name, what, time.time())
        with contextlib.suppress(LauncherSignal):  # a second signal: stop trying
            told = peers.publish_stop(cause)
    tail = "; told the other nodes" if told else ""
    console.say(f"received {sig.name} while {what}: stopping{tail}")
    if peers is not None:
        with contextlib.suppress(LauncherSignal):  # a second signal: do not wait
            if told:
                peers.wait_readers()
        with contextlib.suppress(LauncherSignal):
            peers.close(linger=False)
    return 128 + sig.signum
