"""A launcher stopped by a signal outside a supervised round (connecting, at the
rendezvous, waiting for the others): what it was doing (`Where`), the one line it
prints, the other nodes told (`Peers.publish_stop`), and, when the round's processes
had ended already (`Unsettled`), its summary.json written whole before it exits: every
process's end, exit code 128+N (a Slurm scancel's SIGTERM may come just then).
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator

from paddlike.launch import NamedTuple
from paddlike.launch.console.output import Console
from paddlike.launch.peers.api import Peers
from paddlike.launch.plan.exitcode import signal_exit_code
from paddlike.launch.plan.nodejob import NodeJob
from paddlike.launch.plan.policy import launcher_signal_cause
from paddlike.launch.run.signals import FROM_STARTER, LauncherSignal
from paddlike.summary import RootCause, RunStatus

TYPE_CHECKING = False  # typing's, without importing typing (start-up time)
if TYPE_CHECKING:
    from paddlike.launch.peers.api import RoundWatch
    from paddlike.launch.plan.plan import LaunchPlan
    from paddlike.launch.run.record import RunRecord
    from paddlike.launch.run.supervisor import RunOutcome


class Unsettled(NamedTuple):
    """A round whose processes have ended, its summary not yet final (the launcher waits
    for the other nodes' ends)."""

    record: RunRecord
    plan: LaunchPlan
    outcome: RunOutcome
    restarts: int
    watch: RoundWatch


class Where:
    """What the launcher is doing, for the line a signal prints."""

    def __init__(self) -> None:
        self.waiting = "starting"
        self.peers: Peers | None = None
        self.job: NodeJob | None = None  # once a rendezvous placed it (its rank assigned)
        self.unsettled: Unsettled | None = None  # a round ended here, not yet everywhere

    @property
    def what(self) -> str:
        return self.peers.waiting_for if self.peers is not None else self.waiting


def signal_cause(host: str, node_index: int, signum: int, what: str) -> RootCause:
    """This launcher's signal as the cause; one the cluster starter passed on is named as
    the start command's, in the same words on every host."""
    by_starter = signum in FROM_STARTER
    return launcher_signal_cause(host, node_index, signum, what, time.time(), by_starter=by_starter)


def stopped_by_signal(sig: LauncherSignal, where: Where, job: NodeJob, console: Console) -> int:
    """One line, the other nodes told (when connected), exit 128+N."""
    what = where.what
    peers = where.peers
    job = where.job or job
    told = False
    if where.unsettled is not None:  # first: the launcher may be killed soon after a signal
        with contextlib.suppress(LauncherSignal):
            _write_stopped(where.unsettled, sig, job, what)
    if peers is not None:
        cause = signal_cause(job.host, job.index, sig.signum, what)
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
    return signal_exit_code(sig.signum)


def _write_stopped(round_: Unsettled, sig: LauncherSignal, job: NodeJob, what: str) -> None:
    """The round's summary, final: its processes' ends, the job's cause when known (else
    this launcher's signal), exit code 128+N."""
    cause = round_.watch.root_cause or round_.outcome.root_cause
    if cause is None:
        cause = signal_cause(job.host, job.index, sig.signum, what)
    round_.record.finished(
        round_.plan,
        round_.outcome.records,
        round_.restarts,
        status=RunStatus.INTERRUPTED,
        exit_code=signal_exit_code(sig.signum),
        cause=cause,
    )


@contextlib.contextmanager
def before_start(
    record: RunRecord, plan: LaunchPlan, restarts: int, where: Where
) -> Iterator[None]:
    """A round placed, its workers not started yet (endpoints.log being written, the
    round's watch opening, --preload's zygote still importing):
    an ending signal meanwhile leaves summary.json whole, no process, exit 128+N and this
    launcher's signal as the cause (the reader says STOPPED, not "job unknown"); then
    `stopped_by_signal` goes on as anywhere outside a round."""
    began = time.time()
    try:
        yield
    except LauncherSignal as sig:
        job = where.job
        if job is not None:
            if record.start_time is None:  # no process ran: the time since the round began
                record.start_time = began
            cause = signal_cause(job.host, job.index, sig.signum, where.what)
            with contextlib.suppress(LauncherSignal):
                record.finished(
                    plan,
                    [],
                    restarts,
                    status=RunStatus.INTERRUPTED,
                    exit_code=signal_exit_code(sig.signum),
                    cause=cause,
                )
        raise
